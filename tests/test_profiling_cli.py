"""`bubblelab analyze` end to end, as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.profiling_trace_builder import blocking_trace, pipelined_trace

ROOT = Path(__file__).parents[1]


def bubblelab(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bubblelab", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"COLUMNS": "120", "PATH": "/usr/bin:/bin"},
        timeout=120,
    )


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> list[Path]:
    root = (
        tmp_path_factory.mktemp("cli") / "odd dir ?#'q'"
    )  # the trace path is quoted into SQL and a URI
    root.mkdir()
    return [blocking_trace(root / "depth 1.sqlite"), pipelined_trace(root / "depth 2.sqlite")]


def test_analyze_json_groups_by_depth_and_streams(traces, tmp_path):
    catalog = tmp_path / "catalog.duckdb"
    result = bubblelab(
        "analyze", *map(str, traces), "--json", "--warmup", "1", "--catalog", str(catalog)
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    groups = {(g["depth"], g["streams"]): g for g in report["groups"]}
    assert set(groups) == {(1, 4), (2, 2)}  # streams: the steady batch size, no metadata given
    blocking, pipelined = groups[(1, 4)], groups[(2, 2)]
    assert blocking["steps"] == 3 and blocking["period_ms"] == {
        "median": 1.0,
        "p10": 1.0,
        "p90": 1.0,
    }
    assert blocking["bubble_ms"]["median"] == pytest.approx(0.45)
    assert blocking["kernel_gap_ms"]["median"] == pytest.approx(0.01)
    attribution = blocking["attribution_ms_per_step"]
    assert attribution["phase"] == pytest.approx({"wait": 0.45})  # every interval began in `wait`
    assert attribution["top_level"] == pytest.approx({"commit": 0.45})
    assert attribution["top_level_by_time"] == pytest.approx(
        {"commit": 0.15, "plan": 0.1, "outside any phase": 0.1, "launch": 0.1}
    )
    assert pipelined["forward_ms"]["median"] == pytest.approx(0.352)
    assert pipelined["attribution_ms_per_step"]["top_level"] == pytest.approx({"launch": 0.028})
    assert [r["flagged_syncs"] for r in report["runs"]] == [2, 0]
    # depth 1: every gap ended when the host finally launched; depth 2: the next work was already
    # queued
    assert (blocking["host_late_share"], pipelined["host_late_share"]) == (1.0, 0.0)
    # the catalog keeps the runs: analysing it again needs no traces and gives the same answer
    again = bubblelab("analyze", "--json", "--warmup", "1", "--catalog", str(catalog))
    assert json.loads(again.stdout)["groups"] == report["groups"]


def test_analyze_prints_tables(traces):
    result = bubblelab("analyze", *map(str, traces), "--warmup", "1")
    assert result.returncode == 0, result.stderr
    assert (
        "Steady-state steps" in result.stdout
        and "0.450" in result.stdout
        and "45.0" in result.stdout
    )
    assert "outside any phase" in result.stdout and "kernel gap" in result.stdout
    assert "2 syncs or copies stall the pipeline" in result.stdout


def test_analyze_bad_trace_is_one_line_exit_2(tmp_path):
    junk = tmp_path / "junk.sqlite"
    junk.write_text("not a database")
    result = bubblelab("analyze", str(junk))
    assert result.returncode == 2
    assert (
        result.stderr.strip() == f"bubblelab: error: {junk}: not an SQLite file "
        "(expected `nsys export --type sqlite` output)"
    )
    assert bubblelab("analyze").returncode == 2
