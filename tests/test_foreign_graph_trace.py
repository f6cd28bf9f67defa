"""A prediction from a trace of CUDA-graph replays is the profiled engine's: nsys holds the host in
every cudaGraphLaunch far longer than unprofiled (on our engine ~0.25 ms traced node by node, ~0.1
ms traced whole), all of it exposed at depth 1. The prediction then names that time and its share
of the step's host time and is marked (an upper bound where the GPU's work outlasts the host's),
whichever way the graphs were traced."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bubblelab.core.steady import steady_state
from bubblelab.costmodel.model import host_tick_ms
from bubblelab.profiling import analysis
from bubblelab.profiling.catalog import connect
from bubblelab.runs.analysis import analyze_traces
from testing.synthetic_engines import Engine, engine_trace
from testing.synthetic_trace import TraceBuilder
from tests.cli_helpers import ROOT, run_bubblelab

D1 = ROOT / "traces" / "qwen3-0.6b-s1-d1.sqlite.gz"  # our engine, depth 1, traced by node


def _trace(path: Path, engine: Engine) -> Path:
    b = TraceBuilder()
    engine_trace(b, engine)
    return b.write(path, our_domain=False)


@pytest.mark.parametrize("mode", ["node", "graph"])
def test_the_warning_names_every_traced_graph_launch(tmp_path, mode):
    con = connect(None)
    trace = _trace(tmp_path / f"{mode}.sqlite", Engine(steps=14, graph_trace=mode))
    (run,) = analyze_traces([trace], catalog=con)["runs"]
    gain = run["pipelining"]
    assert "speedup_pct" in gain
    # brute force: the engine's graph launches hold the host 30 us each, one a decode step
    steady = steady_state(analysis.per_step(con, run["run_id"]))
    host = host_tick_ms(steady).to_numpy(float)
    assert gain["graph_launch_ms"] == pytest.approx(0.030)
    assert gain["graph_launch_share"] == pytest.approx(np.median(0.030 / host), abs=1e-6)
    assert gain["graph_trace"] == mode
    first = gain["assumptions"][0]
    how = "node by node" if mode == "node" else "whole (one row a replay)"
    assert first.startswith(f"nsys traced the CUDA graphs {how}")
    assert "0.030 ms" in first
    assert ("--cuda-graph-trace=graph" in first) == (mode == "node")
    upper = gain["gpu_ms"] >= gain["host_ms"] - 0.030
    assert gain["bound"] == ("upper" if upper else None)
    assert ("an upper bound for the unprofiled engine's" in first) == upper


def test_our_node_traced_trace_read_as_foreign_is_an_upper_bound():
    """The committed depth-1 trace (--cuda-graph-trace=node) read without its NVTX ranges: the
    prediction says what nsys added to each launch and prints as an upper bound."""
    (run,) = analyze_traces([D1], domain="none")["runs"]
    gain = run["pipelining"]
    assert gain["bound"] == "upper" and 0.1 < gain["graph_launch_ms"] < 0.5
    assert 0 < gain["graph_launch_share"] < 1
    assert gain["assumptions"][0].startswith("nsys traced the CUDA graphs node by node")
    out = run_bubblelab("analyze", str(D1.relative_to(ROOT)), "--domain", "none", columns=200)
    assert out.returncode == 0, out.stderr
    line, whole = [s for s in out.stdout.splitlines() if "pipelining would buy" in s]
    assert "upper bound (the profiled engine's: graphs traced node-level)" in line
    assert "over the whole trace, upper bound" in whole  # the bound holds for both figures
    assert "nsys traced the CUDA graphs node by node" in out.stdout
    assert "--cuda-graph-trace=graph" in out.stdout
