"""Engines that replay CUDA graphs, traced whole (nsys --cuda-graph-trace=graph) or among eager
kernels: steps, period, busy, bubble, gaps and attribution against brute force, as for every foreign
trace (tests/test_profiling_foreign.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings

from bubblelab.profiling import analysis, kernels
from bubblelab.profiling.catalog import connect
from bubblelab.profiling.ingest import ingest
from bubblelab.profiling.steps import StepOptions
from testing.synthetic_engines import Engine
from testing.synthetic_trace import TraceBuilder
from tests.foreign_checks import build, check_against_brute_force, engines, last_launch

GRAPH_TRACED = [
    Engine(graph_trace="graph"),  # nano-vllm-like: one forward graph a step, eager sampling
    Engine(graph_trace="graph", graphs_per_step=4),  # piecewise graphs: four replays a step
    Engine(graph_trace="graph", driver_api=True, close="event", extra_syncs=2),
    Engine(graph_trace="graph", prefill_first=False, step_range="engine.step"),
]


@pytest.mark.parametrize("engine", GRAPH_TRACED, ids=["one", "piecewise", "driver", "range"])
def test_graphs_traced_whole_are_read_not_refused(tmp_path, engine):
    """nsys --cuda-graph-trace=graph: a replay is one GRAPH_TRACE row, its kernels absent. Each is
    one GPU op linked to its launch; steps, period, busy, bubble, gaps and attribution match brute
    force over the raw rows; the same engine traced by node has the same steps, period and bubble
    (its kernel gaps inside a graph become busy time); the kernel view says what was not seen."""
    options = StepOptions(step_range=engine.step_range) if engine.step_range else None
    trace, (truth,) = build(tmp_path / "graph.sqlite", engine)
    con = connect(None)
    run = ingest(trace, None, {}, steps=options, con=con)
    expected = truth.range_windows if engine.step_range else truth.windows
    steps, _ = check_against_brute_force(con, run, trace, expected)
    replays = con.execute(
        "SELECT count(*), count(launched_at), count(DISTINCT graph_node), min(name) FROM gpu_ops "
        "WHERE run_id = ? AND op = 'graph'",
        [run],
    ).fetchone()
    assert replays[:3] == (len(truth.graph_launches),) * 2 + (engine.graphs_per_step,)
    assert replays[3].endswith("[whole replay]")
    assert con.execute(
        "SELECT count(*) FROM gpu_ops WHERE run_id = ? AND graph_node IS NOT NULL "
        "AND op <> 'graph'",
        [run],
    ).fetchone() == (0,)
    node_trace, _ = build(tmp_path / "node.sqlite", replace(engine, graph_trace="node"))
    node_run = ingest(node_trace, None, {}, steps=options, con=con)
    node = analysis.per_step(con, node_run)
    for column in ("period_ms", "bubble_ms", "gpu_start_ns", "gpu_end_ns"):
        assert steps[column].tolist() == pytest.approx(node[column].tolist(), nan_ok=True)
    assert (steps.busy_ms + steps.kernel_gap_ms).tolist() == pytest.approx(
        (node.busy_ms + node.kernel_gap_ms).tolist(), nan_ok=True
    )
    assert "not traced" in kernels.kernel_view(con, run)["note"]
    assert kernels.kernel_view(con, node_run)["note"] is None
    top = kernels.top_kernels(con, run)
    assert top.kernel.str.startswith("CUDA graph").sum() == engine.graphs_per_step


def test_graph_rows_mixed_with_eager_kernels_and_graph_steps(tmp_path):
    """The graph rule steps by whole replays; eager kernels between them still count."""
    trace, (truth,) = build(tmp_path / "g.sqlite", Engine(graph_trace="graph", steps=10))
    con = connect(None)
    run = ingest(trace, None, {}, steps=StepOptions(rule="graph"), con=con)
    g = [*truth.graph_launches, last_launch(trace) + 1]
    check_against_brute_force(con, run, trace, list(zip(g[:-1], g[1:], strict=True)))
    ops = dict(
        con.execute(
            "SELECT op, count(*) FROM gpu_ops WHERE run_id = ? GROUP BY op", [run]
        ).fetchall()
    )
    assert ops["graph"] == len(truth.graph_launches) and ops["kernel"] > 0


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(engines())
def test_random_graph_traced_engines_match_brute_force(tmp_path_factory, engine):
    engine = replace(engine, graph_trace="graph")
    trace, (truth,) = build(tmp_path_factory.mktemp("g") / "t.sqlite", engine)
    con = connect(None)
    run = ingest(trace, None, {}, con=con)
    check_against_brute_force(con, run, trace, truth.windows)


def test_graph_rule_on_whole_replays_skips_the_small_side_graph(tmp_path):
    """Traced whole, replays carry no node count: the graph rule sizes them by GPU time, so a small
    sampling graph beside each forward graph is no step of its own."""
    b = TraceBuilder()
    for k in range(6):
        t = 1000 + 1000 * k
        b.graph_replay(t, t + 5, t + 400, graph_id=1)  # the forward
        b.graph_replay(t + 10, t + 400, t + 420, graph_id=2)  # the sampling graph
        b.memcpy(t + 20, t + 420, t + 425, copy_kind=2)
        b.sync("cudaStreamSynchronize_v3020", t + 22, t + 426, 3)
    con = connect(None)
    run = ingest(b.write(tmp_path / "g.sqlite", our_domain=False), None, {},
                 steps=StepOptions(rule="graph"), con=con)  # fmt: skip
    steps = analysis.per_step(con, run)
    assert len(steps) == 6 and steps.period_ms[:5].tolist() == pytest.approx([1.0] * 5)
    (detail,) = con.execute("SELECT detail FROM step_rules WHERE run_id = ?", [run]).fetchone()
    assert "6 replays of graphs with >= 198 us on the GPU" in detail
