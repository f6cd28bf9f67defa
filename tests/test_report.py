"""The HTML report: self-contained, one row per configuration, provenance once, an honest headline,
several run directories side by side, trace-derived strings escaped."""

import re
import subprocess
import sys
from html.parser import HTMLParser

import pandas as pd
import pytest

from bubblelab.costmodel.predict import predict_runs
from bubblelab.costmodel.simulate import LoopCosts
from bubblelab.report import summary
from bubblelab.report.report import REPORT_FILE, report_dirs, report_run_dir
from bubblelab.runs.demo import write_demo_run_dir
from bubblelab.runs.rundir import Results, read_results, write_results
from bubblelab.runs.traces import TRACES_DIR

EVIL = "<script>alert(1)</script>"
SECTIONS = (
    "prediction",
    "step",
    "timeline",
    "gaps",
    "attribution",
    "whatif",
    "post",
    "data",
    "provenance",
)
DEMO_COMMAND = "write_demo_run_dir(streams=(1, 8))"


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
    provenance = {EVIL: [EVIL, {"k": EVIL}], "machine": {"cpu_model": EVIL, "git_revision": EVIL}}
    write_results(run_dir, r.runs, r.steps, r.attribution, r.gaps, provenance, r.timeline)
    return run_dir


def with_repeats(tmp_path, repeats: int = 2, **demo) -> Results:
    """A run directory whose configurations each ran `repeats` times (demo runs of other seeds)."""
    parts = []
    for r in range(repeats):
        results = read_results(write_demo_run_dir(tmp_path / f"r{r}", seed=10 * r, **demo).parent)
        for name in ("runs", "steps", "attribution", "gaps", "timeline"):
            frame = getattr(results, name)
            frame["run_id"] = frame["run_id"] + f"-r{r}"
        parts.append(results)
    tables = {
        name: pd.concat([getattr(p, name) for p in parts], ignore_index=True)
        for name in ("runs", "steps", "attribution", "gaps", "timeline")
    }
    out = tmp_path / "repeats"
    write_results(
        out,
        tables["runs"],
        tables["steps"],
        tables["attribution"],
        tables["gaps"],
        {"command": DEMO_COMMAND},
        tables["timeline"],
    )
    return out


class Tables(HTMLParser):
    """Rows of each <table> by the id of the section it is in."""

    def __init__(self):
        super().__init__()
        self.section, self.rows, self.in_body = None, {}, False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "section":
            self.section = attrs.get("id")
        elif tag == "tbody":
            self.in_body = True
        elif tag == "tr" and self.in_body:
            self.rows[self.section] = self.rows.get(self.section, 0) + 1

    def handle_endtag(self, tag):
        if tag == "tbody":
            self.in_body = False


def body_rows(html: str) -> dict[str, int]:
    parser = Tables()
    parser.feed(html)
    return parser.rows


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
    assert not re.search(r"<(script|link|iframe|img)\b", html)  # inline SVG, nothing to fetch
    assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:)?//", html)
    assert not re.search(r"url\((?!#)", html)  # only references inside the page
    ids = re.findall(r'\bid="([^"]+)"', html)
    assert len(ids) == len(set(ids))  # inline SVGs don't clash


def test_report_links_its_exports(demo_dir):
    html = report_run_dir(demo_dir, n_boot=100).read_text()
    links = re.findall(r'href="([^"#]+)"', html)
    assert sorted(links) == [
        "export/attribution.parquet",
        "export/gaps.parquet",
        "export/runs.parquet",
        "export/steps.parquet",
        "export/trace.json.gz",
    ]
    for link in links:
        assert (demo_dir / link).stat().st_size > 100


def test_one_row_per_configuration_with_the_spread_over_repeats(tmp_path):
    run_dir = with_repeats(tmp_path, repeats=3, streams=(1, 8), output_len=32)
    r = read_results(run_dir)
    assert len(r.runs) == 12  # 2 configurations x 2 depths x 3 repeats
    html = report_run_dir(run_dir, n_boot=50).read_text()
    rows = body_rows(html)
    # the prediction card: a row per configuration in the forecast's table and in what explains it
    assert rows["step"] == 2 and rows["prediction"] == 2 * 2
    assert html.count("<td>3 · 3</td>") == 2  # repeats at depth 1 · depth 2
    # period and tokens/s at both depths of both rows (the simulated depth-2 bubble is 0: no ±)
    assert len(re.findall(r"±\d+\.\d%", html)) >= 2 * 2 * 2
    one = summary.config_table(r)[0]
    assert one["repeats_d1"] == one["repeats_d2"] == 3
    assert one["period_ms_d1_lo"] < one["period_ms_d1"] < one["period_ms_d1_hi"]


def test_the_step_table_shows_the_unprofiled_runs(tmp_path, demo_dir):
    """A sweep runs each configuration unprofiled and under nsys: the per-configuration table shows
    the former (what the engine does), never a mix of both as if they were repeats."""
    r = read_results(demo_dir)
    nsys = {name: getattr(r, name).copy() for name in ("runs", "steps", "attribution", "gaps")}
    for frame in nsys.values():
        frame["run_id"] = frame["run_id"] + "-nsys"
    nsys["steps"]["period_ms"] *= 1.5  # the profiler's slower host
    runs = pd.concat([r.runs.assign(profiled=False), nsys["runs"].assign(profiled=True)])
    tables = {n: pd.concat([getattr(r, n), nsys[n]]) for n in ("steps", "attribution", "gaps")}
    write_results(tmp_path, runs, tables["steps"], tables["attribution"], tables["gaps"], {})
    html = report_run_dir(tmp_path, n_boot=20).read_text()
    assert html.count("<td>1 · 1</td>") == 2  # one unprofiled run a depth, not two "repeats"
    assert "4 runs under nsys are compared with them" in html
    plain = summary.config_table(read_results(demo_dir))
    shown = summary.config_table(summary.unprofiled(read_results(tmp_path)))
    assert [c["period_ms_d1"] for c in shown] == [c["period_ms_d1"] for c in plain]


def test_provenance_is_said_once(tmp_path):
    run_dir = with_repeats(tmp_path, repeats=2, streams=(1, 8), output_len=32)
    html = report_run_dir(run_dir, n_boot=50).read_text()
    assert html.count(DEMO_COMMAND) == 1  # the sweep's command, not one per run
    assert html.count("<summary>All 8 runs</summary>") == 1  # the runs themselves: one fold


def test_headline_is_the_median_configuration():
    """The forecast from depth 1 alone and the observed speedup of the median configuration, each
    with its interval and ? when wider than ±1 point; the range of every one; the largest miss."""
    predictions = pd.DataFrame(
        {
            "label": ["a", "b", "c"],
            "observed_pct": [1.0, 5.0, 30.0],
            "observed_lo": [0.5, 3.0, 29.5],
            "observed_hi": [1.5, 7.0, 30.5],
            "observed_known": [True, False, True],
            "pairs": [8, 6, 8],
            "wall_d1_predicted_pct": [2.0, 4.0, 33.0],
            "wall_d1_predicted_lo": [1.8, 3.5, 32.0],
            "wall_d1_predicted_hi": [2.2, 4.5, 34.0],
            "wall_d1_error_pts": [-1.0, 1.0, -3.0],
            "wall_d1_error_lo": [-1.2, 0.0, -4.0],
            "wall_d1_error_hi": [-0.8, 2.0, -2.0],
            "wall_error_pts": [0.5, -2.0, 1.0],  # the model fed depth 2: not in the headline
        }
    )
    line = summary.headline(predictions, [])
    assert line is not None
    assert (line["label"], line["forecast"], line["observed"]) == (
        "b",
        "+4.0% [+3.5, +4.5]",
        "+5.0% [+3.0, +7.0] ?",
    )
    assert (line["observed_min"], line["observed_max"]) == (1, 30)
    assert (line["forecast_min"], line["forecast_max"]) == (2, 33)
    assert line["configs"] == 3 and line["known"] == 2 and line["within_1"] == 2
    assert (line["miss"], line["miss_label"]) == ("-3.0 pts [-4.0, -2.0]", "c")  # the largest
    assert line["noise"] == []


def test_page_headline_follows_the_rule(demo_dir):
    html = report_run_dir(demo_dir, n_boot=100).read_text()
    r = read_results(demo_dir)
    table = predict_runs(r.runs, r.steps, n_boot=100)
    hero = html[html.index('<header class="hero">') : html.index("</header>")]
    big = re.findall(r'<div class="big">([^<]+)<', hero)
    median = table.sort_values("observed_pct").iloc[(len(table) - 1) // 2]
    assert big[0] == f"{median['wall_d1_predicted_pct']:+.1f}%"  # the forecast comes first
    assert f"observed {median['observed_pct']:+.1f}%" in hero
    assert f"{table['observed_pct'].max():+.1f}%" in hero  # the range is there, beside it


def test_cpu_runs_are_named_cpu(tmp_path):
    run_dir = tmp_path / "cpu"
    write_demo_run_dir(run_dir, streams=(1, 2), requests_per_stream=3, output_len=24)
    r = read_results(run_dir)
    r.runs["device"] = "cpu"
    write_results(run_dir, r.runs, r.steps, r.attribution, r.gaps, r.provenance, r.timeline)
    html = report_run_dir(run_dir, n_boot=50).read_text()
    assert "on CPU" in html and "What if the CPU were faster?" in html and "CPU busy %" in html
    # "GPU" is left only where the post's own GPUs are named (its table, the footer's title).
    outside_post = re.sub(r'<section class="card" id="post">.*?</section>', "", html, flags=re.S)
    outside_post = re.sub(r"<footer>.*?</footer>", "", outside_post, flags=re.S)
    assert "GPU" not in outside_post


def test_several_run_directories_side_by_side(tmp_path):
    a, b = tmp_path / "machine-a", tmp_path / "machine-b"
    write_demo_run_dir(a, streams=(1, 8), output_len=32, costs=LoopCosts(fwd_base=1.0))
    write_demo_run_dir(b, streams=(8, 32), output_len=32, costs=LoopCosts(fwd_base=3.0))
    page = report_dirs([a, b], tmp_path / "compare" / REPORT_FILE, n_boot=50)
    html = page.read_text()
    assert body_rows(html)["compare"] == 1  # only 8 streams ran in both
    compare = html[html.index('id="compare"') : html.index('id="prediction"')]
    assert "machine-a" in compare and "machine-b" in compare
    assert "simulated · 8 streams" in compare
    assert body_rows(html)["prediction"] == 2 * 4  # each one's configurations, apart, twice
    assert (page.parent / "export" / "trace.json.gz").is_file()
    assert (
        html.count("<h3>machine-a · 4 runs</h3>") == html.count("<h3>machine-b · 4 runs</h3>") == 1
    )


def test_directory_names_are_escaped_too(tmp_path):
    evil_name = "<img src=x onerror=alert(1)>"
    a, b = tmp_path / "a" / evil_name, tmp_path / "b" / evil_name
    for d in (a, b):
        write_demo_run_dir(d, streams=(1,), output_len=24)
    html = report_dirs([a, b], tmp_path / REPORT_FILE, n_boot=50).read_text()
    assert "<img" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html


def test_trace_strings_are_escaped_everywhere(evil_dir):
    html = (evil_dir / REPORT_FILE).read_text()
    assert EVIL not in html
    assert "<script" not in html
    escaped = "&lt;script&gt;alert(1)&lt;/script&gt;"
    # run ids, commands, trace paths, model names, machine facts and provenance keys and values are
    # all shown, escaped.
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
    assert "lane from the" in html  # no raw timeline: per-step fallback
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


def test_cli_compares_directories_into_out(tmp_path, demo_dir):
    out = tmp_path / "both" / "page.html"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bubblelab",
            "report",
            str(demo_dir),
            str(demo_dir),
            "--n-boot",
            "20",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2 and "needs --out PATH" in done.stderr
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bubblelab",
            "report",
            str(demo_dir),
            str(tmp_path / "x"),
            "--out",
            str(out),
            "--n-boot",
            "20",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2 and "x does not exist" in done.stderr


def test_report_of_another_engines_trace(tmp_path):
    """A trace bubblelab did not make (depth, streams and batch unknown) reads as traced, and its
    page forecasts what pipelining would buy it instead of finding nothing to predict."""
    trace = TRACES_DIR / "nsys-h200-probe.sqlite"
    html = report_run_dir(trace, n_boot=20, out=tmp_path / REPORT_FILE).read_text()
    assert body_rows(html)["step"] == 1 and "1 as traced" in html
    assert "<h2>What pipelining would buy</h2>" in html and "kpi-trace-forecast" in html
    assert "No configuration was measured at both depths" not in html


def test_report_names_a_configuration_it_cannot_predict(tmp_path, demo_dir):
    r = read_results(demo_dir)
    broken = r.steps[
        ~(r.steps["run_id"].str.startswith("sim-d2-s8") & (r.steps["kind"] == "decode"))
    ]
    write_results(tmp_path, r.runs, broken, r.attribution, r.gaps, r.provenance, r.timeline)
    html = report_run_dir(tmp_path, n_boot=50).read_text()
    assert "Left out: sim · simulated · 8 streams: no steady-state decode steps" in html
    assert "sim · simulated · 1 stream" in html


def test_long_provenance_is_a_line_with_its_json_folded(tmp_path):
    """A sweep's timings (~1,500 px of JSON on the page) read as one line of the facts table,
    the JSON behind a <details>; short values stay whole."""
    run_dir = tmp_path / "run"
    write_demo_run_dir(run_dir, streams=(1,), requests_per_stream=2, output_len=16)
    r = read_results(run_dir)
    timings = {f"pass{i}": {"wall_s": 1.5 * i, "runs": list(range(20))} for i in range(30)}
    limits = {f"limit{i}": 16384 * i for i in range(1, 20)} | {"rate": 123456.7}
    r.provenance.update(timings=timings, catalog="out/catalog.duckdb", limits=limits)
    write_results(run_dir, r.runs, r.steps, r.attribution, r.gaps, r.provenance, r.timeline)
    html = report_run_dir(run_dir, n_boot=20, export=False).read_text()
    line = re.search(r"<dt>timings</dt><dd>(.*?)<details", html, re.S)
    assert line and line.group(1).startswith("30 entries: pass0, pass1")
    assert len(line.group(1)) < 250
    assert re.search(r'<details class="raw">\s*<summary>JSON</summary><pre>\{', html)
    assert "<dt>catalog</dt><dd>out/catalog.duckdb</dd>" in html
    line = re.search(r"<dt>limits</dt><dd>(.*?)<details", html, re.S)
    assert line and line.group(1).startswith("20 entries: limit1 16384, limit2 32768")
    assert "e+0" not in line.group(1)  # counts whole, never 1.638e+04


def test_our_own_runs_need_no_card_on_how_their_steps_were_found(demo_dir):
    page = report_run_dir(demo_dir, n_boot=20, export=False).read_text()
    assert 'id="found"' not in page and 'id="split"' not in page
