"""What the foreign-trace tests share: a synthetic engine's trace written to disk, the step windows
the catalog found, and every figure of a run checked against its brute-force value over the raw rows
(tests/foreign_brute_force.py); a hypothesis strategy of engine shapes."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from hypothesis import strategies as st

from bubblelab.profiling import analysis
from bubblelab.profiling.steps import GAP_THRESHOLD_US
from testing.synthetic_engines import Engine, engine_trace
from testing.synthetic_trace import MAIN, TraceBuilder
from tests.foreign_brute_force import attribution, blocking_rows, launching_call, load, per_step

GAP_NS = round(GAP_THRESHOLD_US * 1e3)


def build(path: Path, *engines: Engine) -> tuple[Path, list]:
    b = TraceBuilder()
    truths = [engine_trace(b, e) for e in engines]
    return b.write(path, our_domain=False), truths


def windows(con, run_id: str) -> list[tuple[int, int]]:
    rows = con.execute(
        "SELECT host_start, host_end FROM step_windows WHERE run_id = ? ORDER BY step", [run_id]
    ).fetchall()
    return [tuple(r) for r in rows]


def last_launch(trace: Path) -> int:
    """When the trace's last call that launched a GPU op started (ns)."""
    raw = load(trace)
    calls = launching_call(raw)
    return max(calls[key]["start"] for o in raw.ops if (key := (o["pid"], o["corr"])) in calls)


def check_against_brute_force(con, run_id: str, trace: Path, truth_windows, tid=MAIN, **part):
    """Every figure of the run equals its brute-force value over the raw rows."""
    raw = load(trace, **part)
    assert windows(con, run_id) == truth_windows
    expected = per_step(raw, truth_windows, GAP_NS)
    steps = analysis.per_step(con, run_id)
    assert steps["step"].tolist() == list(range(len(expected)))
    for row, want in zip(steps.itertuples(), expected, strict=True):
        assert (row.gpu_start_ns, row.gpu_end_ns) == (want["gpu_start"], want["gpu_end"])
        if want["period"] is None:
            assert row.period_ms != row.period_ms  # NaN
            continue
        assert round(row.period_ms * 1e6) == want["period"]
        assert round(row.busy_ms * 1e6) == want["busy"]
        assert round(row.kernel_gap_ms * 1e6) == want["kernel_gap"]
        assert round(row.bubble_ms * 1e6) == want["bubble"]
        assert round(row.forward_ms * 1e6) == want["period"] - want["bubble"]
        # period = busy + kernel gaps + bubble, exactly
        assert want["busy"] + want["kernel_gap"] + want["bubble"] == want["period"]
    timed = steps[steps.period_ms.notna()]
    gaps = analysis.idle_gaps(con, run_id, timed)
    assert list(zip(gaps.start_ns, gaps.end_ns, strict=True)) == [
        g for w in expected for g in w["gaps"]
    ]
    assert (gaps.within.notna() == (gaps.idle_us * 1e3 < GAP_NS)).all()
    bubble_gaps = [g for w in expected for g in w["gaps"] if g[1] - g[0] >= GAP_NS]
    began, by_time = attribution(raw, tid, bubble_gaps)
    table = analysis.attribution(con, run_id, timed)
    for split, want in (("began_ms", began), ("time_ms", by_time)):
        ns = (table[split] * 1e6).round()
        assert {p: n for p, n in zip(table.phase, ns, strict=True) if n} == want
    bubbles = gaps[gaps.within.isna()]
    assert bubbles.began_in.tolist() == [
        next(iter(attribution(raw, tid, [(s, e)])[0]))
        for s, e in zip(bubbles.start_ns, bubbles.end_ns, strict=True)
    ]
    assert gaps[gaps.within.notna()].began_in.isna().all()  # kernel gaps are not looked up
    # sync inventory: the same rows, each in the step whose window holds it
    inventory = analysis.sync_inventory(con, run_id)
    want_rows = blocking_rows(raw)
    assert list(zip(inventory.event, inventory.api, inventory.start_ns, strict=True)) == [
        (r["event"], r["api"], r["start"]) for r in want_rows
    ]
    step_of = [
        next((k for k, (h0, h1) in enumerate(truth_windows) if h0 <= r["start"] < h1), None)
        for r in want_rows
    ]
    assert [None if pd.isna(s) else int(s) for s in inventory.step] == step_of
    return steps, inventory


@st.composite
def engines(draw) -> Engine:
    return Engine(
        steps=draw(st.integers(3, 8)),
        extra_syncs=draw(st.sampled_from([0, 0, 1, 5])),
        graph=draw(st.booleans()),
        driver_api=draw(st.booleans()),
        close=draw(st.sampled_from(["tolist", "memcpy", "event"])),
        framework_ranges=draw(st.booleans()),
        osrt=draw(st.booleans()),
        prefill_first=draw(st.booleans()),
        nodes=draw(st.integers(1, 12)),
        node_us=draw(st.floats(2, 40)),
        node_gap_us=draw(st.sampled_from([0.5, 1.0, 4.0, 6.0, 30.0])),
        bookkeeping_us=draw(st.floats(300, 2000)),
    )
