"""One bubble attribution, one meaning everywhere: a committed trace through every output that
carries it, `bubblelab analyze --json`, the results tables (and results.json), the report's table,
the Parquet export and the notebooks' helper, gives the same two splits of the same bubble (where
its time went, where each gap began); the Perfetto trace's steps hold the same bubble."""

from __future__ import annotations

import gzip
import json
import re

import pandas as pd
import pytest

from bubblelab.profiling.analysis import steady_state
from bubblelab.report.perfetto import STEPS_TID
from bubblelab.report.report import report_run_dir
from bubblelab.report.summary import attribution_per_step
from bubblelab.runs.rundir import read_results, write_results
from bubblelab.runs.sources import open_source
from bubblelab.runs.traces import TRACES_DIR
from tests.cli_helpers import run_bubblelab

TRACE = TRACES_DIR / "qwen3-0.6b-s32-d1.sqlite.gz"  # depth 1: the two splits differ most
SPLITS = {"time": "time_ms", "began": "began_ms"}


@pytest.fixture(scope="module")
def analyzed() -> dict:
    result = run_bubblelab("analyze", str(TRACE), "--json", "-")
    assert result.returncode == 0, result.stderr
    (run,) = json.loads(result.stdout)["runs"]
    return run


@pytest.fixture(scope="module")
def results():
    return open_source(TRACE).results


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "report.html"
    report_run_dir(TRACE, n_boot=20, out=out)
    return out.parent


def per_step(table: pd.DataFrame, level: str, split: str, steps: int) -> dict:
    """A table's split summed by phase or top-level part, ms per step, its zeros left out (as
    analyze leaves them out)."""
    totals = table.groupby(level)[split].sum() / steps
    return totals[totals > 0].to_dict()


def test_the_headline_is_where_the_time_went(analyzed):
    """At depth 1 every gap begins while the host waits in commit, but its time goes mostly to the
    next tick's launch: the split that says what to make faster is the time split."""
    split = analyzed["attribution_ms_per_step"]
    assert max(split["began"]["top_level"], key=split["began"]["top_level"].get) == "commit"
    assert max(split["time"]["top_level"], key=split["time"]["top_level"].get) == "launch"
    total = sum(split["time"]["phase"].values())
    for name in SPLITS:  # each split divides the same bubble
        for level in ("phase", "top_level"):
            assert sum(split[name][level].values()) == pytest.approx(total, abs=1e-5)


def test_analyze_and_the_results_tables_agree(analyzed, results, tmp_path):
    steps = analyzed["steps"]
    write_results(tmp_path, results.runs, results.steps, results.attribution, results.gaps)
    for tables in (results, read_results(tmp_path)):  # in memory, and through results.json
        for name, column in SPLITS.items():
            for level in ("phase", "top_level"):
                expected = analyzed["attribution_ms_per_step"][name][level]
                found = per_step(tables.attribution, level, column, steps)
                assert found == pytest.approx(expected, abs=1e-6), (name, level)


def test_the_notebook_helper_and_the_report_table_agree(analyzed, results, report_dir):
    table = attribution_per_step(results)  # what notebook 01 and the report's figure draw
    for name, column in SPLITS.items():
        for level in ("phase", "top_level"):
            expected = analyzed["attribution_ms_per_step"][name][level]
            assert per_step(table, level, column, 1) == pytest.approx(expected, abs=1e-6)
    html = (report_dir / "report.html").read_text()
    section = html[html.index('id="attribution"') : html.index('id="whatif"')]
    assert "<code>time_ms</code>" in section  # the figure draws the time split
    parts = re.findall(r'<th colspan="2">([^<]*)</th>', section)
    cells = re.findall(r"<td>([^<]*)</td>", section)[1:]  # after the depth
    assert len(cells) == 2 * len(parts)
    for i, part in enumerate(parts):
        for j, name in enumerate(SPLITS):
            shown = cells[2 * i + j]
            value = analyzed["attribution_ms_per_step"][name]["top_level"].get(part, 0.0)
            assert (0.0 if shown == "–" else float(shown)) == pytest.approx(value, abs=6e-4)


def test_the_parquet_export_carries_the_same_table(results, report_dir):
    exported = pd.read_parquet(report_dir / "export" / "attribution.parquet")
    columns = ["run_id", "phase", "top_level", *SPLITS.values()]
    pd.testing.assert_frame_equal(
        exported[columns], results.attribution[columns], check_dtype=False
    )


def test_the_perfetto_steps_hold_the_same_bubble(analyzed, results, report_dir):
    """The Chrome/Perfetto trace carries each step's bubble_ms on its steps track (no split):
    over the steady steps it is the bubble both splits divide."""
    trace = json.loads(gzip.decompress((report_dir / "export" / "trace.json.gz").read_bytes()))
    steady = set(steady_state(results.steps)["step"])
    bubble = sum(
        e["args"]["bubble_ms"]
        for e in trace["traceEvents"]
        if e["ph"] == "X" and e["tid"] == STEPS_TID and e["args"]["step"] in steady
    )
    for name, column in SPLITS.items():
        assert results.attribution[column].sum() == pytest.approx(bubble, abs=1e-6)
        total = sum(analyzed["attribution_ms_per_step"][name]["phase"].values())
        assert total * analyzed["steps"] == pytest.approx(bubble, abs=1e-3)
