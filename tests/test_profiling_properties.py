"""The sweep-line SQL against brute force: random nested host ranges and overlapping device intervals on a
small integer clock, where every nanosecond can simply be enumerated."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profiling import analysis
from profiling.catalog import connect
from profiling.ingest import ingest_timeline
from profiling.timeline import StepInfo, Timeline

PHASES = ("plan", "launch", "finalize", "commit")
CHILDREN = {"launch": ("copy_h2d", "forward"), "finalize": ("mask", "sampling"), "commit": ("wait",)}


@st.composite
def runs(draw) -> Timeline:
    tl = Timeline(depth=draw(st.sampled_from([1, 2])))
    clock, last_forward = 0, -1
    for step in range(draw(st.integers(2, 5))):
        tl.add_step(StepInfo(step=step, kind="decode", batch_size=2, tokens=2))
        for name in PHASES:
            clock += draw(st.integers(0, 3))                       # gaps between top-level ranges
            start, inner = clock, clock
            for child in CHILDREN.get(name, ()):
                if draw(st.booleans()):
                    inner += draw(st.integers(0, 2))
                    length = draw(st.integers(0, 6))              # empty ranges happen too
                    tl.add_host(child, step, inner, inner + length)
                    inner += length
            clock = inner + draw(st.integers(1, 4))
            tl.add_host(name, step, start, clock)
        # device work may overlap anything; only forwards start in step order (one compute stream)
        last_forward = draw(st.integers(max(last_forward + 1, clock - 40), max(last_forward + 1, clock) + 10))
        tl.add_device("forward", step, last_forward, last_forward + draw(st.integers(1, 15)))
        start = draw(st.integers(max(0, clock - 40), clock + 10))
        tl.add_device("sampling", step, start, start + draw(st.integers(1, 15)))
    return tl


def innermost(tl: Timeline, t: int) -> str:
    """The latest-started host range open at t (of two starting together, the shorter): the innermost one."""
    open_ranges = [(start, -end, name) for name, _, start, end in tl.host if start <= t < end]
    return max(open_ranges)[2] if open_ranges else "outside any phase"


@settings(max_examples=60, deadline=None)
@given(runs())
def test_sql_matches_brute_force(tl):
    con = connect(None)
    run = ingest_timeline(tl, con, {"depth": tl.depth}, run_id="r")
    steps = analysis.per_step(con, run)
    busy = {t for _, _, start, end in tl.device for t in range(start, end)}
    starts = {step: min(s for phase, k, s, _ in tl.device if k == step and phase == "forward")
              for step in tl.steps}
    idle_by_phase: dict[str, int] = {}
    for row in steps.itertuples():
        assert row.gpu_start_ns == starts[row.step]
        assert row.forward_ms * 1e6 == pytest.approx(sum(e - s for p, k, s, e in tl.device
                                                         if k == row.step and p == "forward"))
        if row.step + 1 not in starts:
            assert row.period_ms != row.period_ms                 # NaN: no next step
            continue
        window = range(starts[row.step], starts[row.step + 1])
        assert row.period_ms * 1e6 == pytest.approx(len(window))
        assert row.busy_ms * 1e6 == pytest.approx(sum(t in busy for t in window))
        assert row.bubble_ms * 1e6 == pytest.approx(sum(t not in busy for t in window))
        for t in window:
            if t not in busy:
                phase = innermost(tl, t)
                idle_by_phase[phase] = idle_by_phase.get(phase, 0) + 1
    with_period = steps[steps.period_ms.notna()]
    table = analysis.attribution(con, run, with_period)
    assert dict(zip(table.phase, table.idle_ms * 1e6)) == pytest.approx(idle_by_phase)
    gaps = analysis.idle_gaps(con, run, with_period)
    assert gaps.idle_us.sum() * 1e3 == pytest.approx(sum(idle_by_phase.values()))
    assert gaps.began_in.tolist() == [innermost(tl, t) for t in gaps.start_ns]
    assert gaps.launch_lag_us.isna().all()                    # a timeline records no launch calls
