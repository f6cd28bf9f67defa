"""`bubblelab analyze` end to end, as a user runs it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.cli_helpers import run_bubblelab
from tests.profiling_trace_builder import blocking_trace, pipelined_trace

ROOT = Path(__file__).parents[1]


def bubblelab(*args: str) -> subprocess.CompletedProcess:
    return run_bubblelab(*args, columns=120, timeout=120)


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
    began, by_time = attribution["began"], attribution["time"]
    assert began["phase"] == pytest.approx({"wait": 0.45})  # every interval began in `wait`
    assert began["top_level"] == pytest.approx({"commit": 0.45})
    assert by_time["top_level"] == pytest.approx(
        {"commit": 0.15, "plan": 0.1, "outside any phase": 0.1, "launch": 0.1}
    )
    assert pipelined["forward_ms"]["median"] == pytest.approx(0.352)
    for split in ("time", "began"):
        assert pipelined["attribution_ms_per_step"][split]["top_level"] == pytest.approx(
            {"launch": 0.028}
        )
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


@pytest.fixture(scope="module")
def fork_trace(tmp_path_factory) -> Path:
    """A nano-vllm-fork-shaped engine: 16 `.item()` syncs a step; its step range's name is rich
    markup."""
    from testing.synthetic_engines import Engine, engine_trace
    from testing.synthetic_trace import TraceBuilder

    b = TraceBuilder()
    engine_trace(b, Engine(steps=16, extra_syncs=16, step_range="[red]step[/red]"))
    return b.write(tmp_path_factory.mktemp("foreign") / "fork.sqlite", our_domain=False)


def test_analyze_foreign_trace_json(fork_trace):
    result = bubblelab("analyze", str(fork_trace), "--json", "--output-len-mean", "64")
    assert result.returncode == 0, result.stderr
    (run,) = json.loads(result.stdout)["runs"]
    assert run["steps_found"]["rule"] == "sync" and run["steps_found"]["steps"] == 16
    extra = {r["api"]: r["per_step"] for r in run["syncs_per_step"] if r["flagged"]}
    assert extra == {"cudaStreamSynchronize_v3020": 16.0, "cudaMemcpyAsync_v3020": 16.0}
    gain = run["pipelining"]
    assert gain["output_len"] == 64 and gain["interval_pct"][0] <= gain["speedup_pct"]
    assert any("16 x cudaStreamSynchronize_v3020 a step" in a for a in gain["assumptions"])
    by_range = bubblelab("analyze", str(fork_trace), "--json", "--step-range", r"^\[red\]step")
    assert json.loads(by_range.stdout)["runs"][0]["steps_found"]["rule"] == "nvtx"


def test_analyze_foreign_trace_prints_names_as_text(fork_trace):
    result = bubblelab("analyze", str(fork_trace), "--step-range", "step")
    assert result.returncode == 0, result.stderr
    assert "[red]step[/red]" in result.stdout  # trace text is data, not markup
    assert "no: extra" in result.stdout and "pipelining would buy" in result.stdout
    assert "over the whole trace" in result.stdout and "--no-zombies" not in result.stdout
    free = bubblelab("analyze", str(fork_trace), "--json", "--no-zombies", "--mean-step-ms", "1.5")
    gain = json.loads(free.stdout)["runs"][0]["pipelining"]
    whole = gain["whole_run"]
    assert gain["z"] == 0 and whole["interval_pct"][0] <= whole["speedup_pct"]
    assert whole["profiler_source"] == "mean step (given)"
    assert whole["wall_block_ms"] / whole["steps"] == pytest.approx(1.5)  # the given mean step
    shaped = bubblelab("analyze", str(fork_trace), "--json", "--output-len-mean", "64",
                       "--streams", "32")  # fmt: skip
    assert json.loads(shaped.stdout)["runs"][0]["pipelining"]["whole_run"]["extra_steps"] > 0
    unshaped = bubblelab("analyze", str(fork_trace), "--streams", "32")
    assert unshaped.returncode == 2 and "needs --output-len-mean" in unshaped.stderr


def test_analyze_foreign_bad_input_exit_2(fork_trace):
    result = bubblelab("analyze", str(fork_trace), "--step-range", "decode_step")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "matches no NVTX range" in result.stderr
    result = bubblelab("analyze", str(fork_trace), "--step-rule", "kernels")
    assert result.returncode == 2
    assert "--step-rule must be one of auto, sync, graph, pause, got 'kernels'" in result.stderr
    rep = fork_trace.with_suffix(".nsys-rep")
    rep.write_bytes(b"not really a report")
    result = bubblelab("analyze", str(rep))  # PATH holds no nsys here
    assert result.returncode == 2 and "cannot export it to SQLite" in result.stderr
    assert "nsys (Nsight Systems) not found" in result.stderr


def test_analyze_takes_the_engines_own_step_time_for_one_foreign_run(fork_trace, tmp_path):
    traced = json.loads(bubblelab("analyze", str(fork_trace), "--json").stdout)["runs"][0]
    step = traced["pipelining"]["t_block_ms"] * 0.9  # the profiler's tenth comes off the host
    given = bubblelab("analyze", str(fork_trace), "--json", "--step-ms", f"{step:.6f}")
    assert given.returncode == 0, given.stderr
    gain = json.loads(given.stdout)["runs"][0]["pipelining"]
    assert gain["t_block_source"] == "given" and gain["t_block_ms"] == pytest.approx(step)
    # this engine's host outlasts its GPU: the host work the profiler added comes off T_pipe too
    assert gain["t_pipe_ms"] < traced["pipelining"]["t_pipe_ms"]
    text = bubblelab("analyze", str(fork_trace), "--step-ms", f"{step:.6f}").stdout
    assert "engine's own step time (given)" in text
    twin = tmp_path / "twin.sqlite"
    twin.write_bytes(fork_trace.read_bytes())
    both = bubblelab("analyze", str(fork_trace), str(twin), "--step-ms", "1")
    assert both.returncode == 2 and both.stderr.count("\n") == 1
    assert "--step-ms needs exactly one foreign run, there are 2" in both.stderr
