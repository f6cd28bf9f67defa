"""The HTML report: self-contained, every section present, trace-derived strings escaped."""

import re
import subprocess
import sys

import pytest

from bubblelab.costmodel.predict import predict_runs
from bubblelab.costmodel.simulate import LoopCosts
from bubblelab.report.report import REPORT_FILE, report_run_dir
from bubblelab.runs.demo import write_demo_run_dir
from bubblelab.runs.rundir import read_results, write_results

EVIL = "<script>alert(1)</script>"
SECTIONS = ("prediction", "step", "timeline", "gaps", "attribution", "whatif", "post", "provenance")


def plant(run_dir):
    """Rewrite a run directory so that every trace-derived string carries a script tag."""
    r = read_results(run_dir)
    evil_id = {rid: f"{rid}{EVIL}" for rid in r.runs["run_id"]}
    for frame in (r.runs, r.steps, r.attribution, r.gaps, r.timeline):
        frame["run_id"] = frame["run_id"].map(evil_id)
    r.runs["model"] = r.runs["preset"] = EVIL
    r.runs["command"] = r.runs["trace_path"] = f"/traces/{EVIL}.nsys-rep"
    r.timeline.loc[r.timeline["phase"] == "launch", "phase"] = EVIL  # an unknown host range
    r.timeline.loc[r.timeline["phase"] == "forward", "phase"] = (
        EVIL  # a kernel name on the GPU lane
    )
    r.attribution.loc[r.attribution["phase"] == "plan", "phase"] = EVIL
    write_results(
        run_dir, r.runs, r.steps, r.attribution, r.gaps, {EVIL: [EVIL, {"k": EVIL}]}, r.timeline
    )
    return run_dir


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("demo")
    write_demo_run_dir(
        run_dir, streams=(1, 8), requests_per_stream=3, output_len=32, costs=LoopCosts(fwd_base=1.0)
    )
    return run_dir


@pytest.fixture(scope="module")
def evil_dir(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("evil")
    write_demo_run_dir(run_dir, streams=(2,), requests_per_stream=3, output_len=24)
    report_run_dir(plant(run_dir), n_boot=100)
    return run_dir


def test_report_is_one_self_contained_page(demo_dir):
    html = report_run_dir(demo_dir, n_boot=100).read_text()
    assert (demo_dir / REPORT_FILE).read_text() == html
    # The page reports these runs: every configuration's predicted and observed speedup.
    r = read_results(demo_dir)
    table = predict_runs(r.runs, r.steps, n_boot=100)
    assert len(table) == 2
    for row in table.itertuples():
        assert f"{row.predicted_pct:+.1f}%" in html and f"{row.observed_pct:+.1f}%" in html
    for section in SECTIONS:
        assert f'id="{section}"' in html
    assert html.count("<svg") >= 6  # timelines x2, gaps, attribution, pred, what-if
    assert not re.search(
        r"<(script|link|iframe|img)\b", html
    )  # figures are inline SVG, nothing to fetch
    assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:)?//", html)
    assert not re.search(r"url\((?!#)", html)  # only references inside the page
    ids = re.findall(r'\bid="([^"]+)"', html)
    assert len(ids) == len(set(ids))  # inline SVGs don't clash


def test_report_tables_carry_the_predictions(demo_dir):
    html = report_run_dir(demo_dir, n_boot=100).read_text()
    r = read_results(demo_dir)
    assert html.count("sim · simulated · 8 streams · depth") >= 2  # step table, one row per depth
    assert "3090 · 32 streams" in html and "+39.1%" in html  # the post's table, re-predicted
    for run_id in r.runs["run_id"]:
        assert run_id in html


def test_trace_strings_are_escaped_everywhere(evil_dir):
    html = (evil_dir / REPORT_FILE).read_text()
    assert EVIL not in html
    assert "<script" not in html
    escaped = "&lt;script&gt;alert(1)&lt;/script&gt;"
    # run ids, commands, trace paths, model names and provenance keys and values are all shown,
    # escaped.
    assert html.count(escaped) >= 10


def test_report_of_unpaired_runs(tmp_path, demo_dir):
    r = read_results(demo_dir)
    keep = r.runs[r.runs["depth"] == 2]
    write_results(
        tmp_path,
        keep,
        r.steps[r.steps["run_id"].isin(keep["run_id"])],
        provenance={"only": "depth 2"},
    )
    html = report_run_dir(tmp_path, n_boot=50).read_text()
    assert "No configuration was measured at both depths" in html
    assert "GPU lane from the" in html  # no raw timeline: per-step fallback
    assert "No attribution table" in html


def test_cli_reports_a_missing_run_dir_in_one_line(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "bubblelab", "report", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"bubblelab: error: no results.json in {tmp_path} (run `bubblelab run-and-profile` first)"
    ]


def test_report_names_a_configuration_it_cannot_predict(tmp_path, demo_dir):
    r = read_results(demo_dir)
    broken = r.steps[
        ~(r.steps["run_id"].str.startswith("sim-d2-s8") & (r.steps["kind"] == "decode"))
    ]
    write_results(tmp_path, r.runs, broken, r.attribution, r.gaps, r.provenance, r.timeline)
    html = report_run_dir(tmp_path, n_boot=50).read_text()
    assert "Left out: sim · simulated · 8 streams: no steady-state decode steps" in html
    assert "sim · simulated · 1 stream" in html
