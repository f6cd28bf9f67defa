"""The sweep-line SQL against brute force: random nested host ranges and overlapping device
intervals on a small integer clock, where every nanosecond can simply be enumerated."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bubblelab.core.timeline import StepInfo, Timeline
from bubblelab.profiling import analysis
from bubblelab.profiling.catalog import connect
from bubblelab.profiling.ingest import ingest, ingest_timeline
from testing.synthetic_trace import DTOH, HTOD, MAIN, TraceBuilder, us

PHASES = ("plan", "launch", "finalize", "commit")
CHILDREN = {
    "launch": ("copy_h2d", "forward"),
    "finalize": ("mask", "sampling"),
    "commit": ("wait",),
}


@st.composite
def runs(draw) -> Timeline:
    tl = Timeline(depth=draw(st.sampled_from([1, 2])))
    clock, last_forward = 0, -1
    for step in range(draw(st.integers(2, 5))):
        tl.add_step(StepInfo(step=step, kind="decode", batch_size=2, tokens=2))
        for name in PHASES:
            clock += draw(st.integers(0, 3))  # gaps between top-level ranges
            start, inner = clock, clock
            for child in CHILDREN.get(name, ()):
                if draw(st.booleans()):
                    inner += draw(st.integers(0, 2))
                    length = draw(st.integers(0, 6))  # empty ranges happen too
                    tl.add_host(child, step, inner, inner + length)
                    inner += length
            clock = inner + draw(st.integers(1, 4))
            tl.add_host(name, step, start, clock)
        # device work may overlap anything; only forwards start in step order (one compute stream)
        last_forward = draw(
            st.integers(max(last_forward + 1, clock - 40), max(last_forward + 1, clock) + 10)
        )
        tl.add_device("forward", step, last_forward, last_forward + draw(st.integers(1, 15)))
        start = draw(st.integers(max(0, clock - 40), clock + 10))
        tl.add_device("sampling", step, start, start + draw(st.integers(1, 15)))
    return tl


def innermost(tl: Timeline, t: int) -> str:
    """The latest-started host range open at t (of two starting together, the shorter): the
    innermost one."""
    open_ranges = [(start, -end, name) for name, _, start, end in tl.host if start <= t < end]
    return max(open_ranges)[2] if open_ranges else "outside any phase"


@settings(max_examples=60, deadline=None)
@given(runs())
def test_sql_matches_brute_force(tl: Timeline) -> None:
    con = connect(None)
    run = ingest_timeline(tl, con, {"depth": tl.depth}, run_id="r")
    steps = analysis.per_step(con, run)
    busy = {t for _, _, start, end in tl.device for t in range(start, end)}
    spans = {(k, p): (s, e) for p, k, s, e in tl.device}  # one interval per step and part here
    starts = {step: spans[step, "forward"][0] for step in tl.steps}
    began: dict[str, int] = {}  # each bubble interval to the phase open when it began
    by_time: dict[str, int] = {}  # each bubble instant to the phase open then
    gpu_idle = 0
    for row in steps.itertuples():
        assert row.gpu_start_ns == starts[row.step]
        for part in ("forward", "sampling"):
            s, e = spans[row.step, part]
            assert getattr(row, f"{part}_ms") * 1e6 == pytest.approx(e - s)
        assert row.kernel_gap_ms == 0  # a timeline records spans only
        if row.step + 1 not in starts:
            assert row.period_ms != row.period_ms  # NaN: no next step
            continue
        window = range(starts[row.step], starts[row.step + 1])
        in_spans = {t for p in ("forward", "sampling") for t in range(*spans[row.step, p])}
        assert row.period_ms * 1e6 == pytest.approx(len(window))
        assert row.busy_ms * 1e6 == pytest.approx(sum(t in busy for t in window))
        assert row.bubble_ms * 1e6 == pytest.approx(sum(t not in in_spans for t in window))
        gpu_idle += sum(t not in busy for t in window)
        for t in window:
            if t not in in_spans:
                phase = innermost(tl, t)
                by_time[phase] = by_time.get(phase, 0) + 1
                if t == window.start or t - 1 in in_spans:
                    opened = phase
                began[opened] = began.get(opened, 0) + 1
    with_period = steps[steps.period_ms.notna()]
    table = analysis.attribution(con, run, with_period)
    for split, expected in (("began_ms", began), ("time_ms", by_time)):
        found = {p: ms * 1e6 for p, ms in zip(table.phase, table[split], strict=True) if ms}
        assert found == pytest.approx(expected)
    gaps = analysis.idle_gaps(con, run, with_period)
    assert gaps.idle_us.sum() * 1e3 == pytest.approx(gpu_idle)
    assert gaps.began_in.tolist() == [innermost(tl, t) for t in gaps.start_ns]
    assert gaps.launch_lag_us.isna().all()  # a timeline records no launch calls


def union_length(intervals: list[tuple[int, int]], lo: int, hi: int) -> int:
    """Length of the union of intervals, clipped to [lo, hi)."""
    total, reach = 0, lo
    for start, end in sorted(intervals):
        start, end = max(start, reach), min(end, hi)
        if end > start:
            total, reach = total + end - start, end
    return total


@st.composite
def traces(draw) -> tuple[TraceBuilder, list]:
    """Nested ranges on two threads; CUDA calls inside or between them launch kernels/copies
    anywhere after their call."""
    b, clock = TraceBuilder(), 100
    launched: list[tuple[int, int, int]] = []
    for step in range(draw(st.integers(2, 4))):
        b.mark(step, "kind=decode bs=1 tokens=1 depth=1", clock)
        for name in PHASES:
            start = clock
            for child in CHILDREN.get(name, ()):
                if draw(st.booleans()):
                    b.range(child, step, clock + 1, clock + 5)
                    clock += 6
            clock += 8
            b.range(name, step, start, clock)
            clock += draw(st.integers(0, 3))
        for _ in range(draw(st.integers(1, 6))):
            at = draw(st.integers(100, clock))
            # never before its launch: such an op is dropped at ingest (test_profiling_trust.py)
            gpu = draw(st.integers(at, at + 40))
            end = gpu + draw(st.integers(1, 12))
            if draw(st.booleans()) or not launched:  # a trace without kernels is refused
                b.kernel("k", at, gpu, end)
            else:
                b.memcpy(at, gpu, end, draw(st.sampled_from([HTOD, DTOH])))
            launched.append((at, gpu, end))
        b.range(
            "plan", step, clock, clock + 2, tid=MAIN + 1
        )  # another thread's ranges never interfere
    return b, launched


@settings(max_examples=30, deadline=None)
@given(traces())
def test_nsys_path_matches_brute_force(tmp_path_factory, trace):
    b, launched = trace
    ranges = [
        (e["start"], e["end"], n, e["int64Value"])
        for e in b.rows["NVTX_EVENTS"]
        if e["eventType"] == 59 and e["globalTid"] == MAIN
        for n, i in b.strings.items()
        if i == e["textId"]
    ]
    con = connect(None)
    run = ingest(b.write(tmp_path_factory.mktemp("t") / "t.sqlite"), None, {}, con=con)
    ops = con.execute(
        'SELECT launched_at, start, "end", phase, step, stream_id FROM gpu_ops ORDER BY ALL'
    ).fetchall()
    assert sorted((us(a), us(g), us(e)) for a, g, e in launched) == [op[:3] for op in ops]
    for at, _, _, phase, step, _ in ops:  # the innermost range open when the launching call started
        open_ranges = [(s, -e, n, k) for s, e, n, k in ranges if s <= at < e]
        assert (phase, step) == (max(open_ranges)[2:] if open_ranges else (None, None))
    steps = analysis.per_step(con, run)
    # spans: forward ops from first start to last end; sampling ops (any stream) from when the GPU
    # could start them (the forward's end, or their first launch call if later; never after their
    # first op) to last end
    for row in steps.itertuples():
        forward = [(g, e) for _, g, e, p, k, _ in ops if k == row.step and p == "forward"]
        sampling = [(a, g, e) for a, g, e, p, k, _ in ops if k == row.step and p == "sampling"]
        span = {
            "forward": max(e for _, e in forward) - min(g for g, _ in forward) if forward else 0,
            "sampling": 0,
        }
        if sampling:
            first = min(g for _, g, _ in sampling)
            ready = max(
                max(e for _, e in forward) if forward else first, min(a for a, _, _ in sampling)
            )
            span["sampling"] = max(e for *_, e in sampling) - min(first, ready)
        assert round(row.forward_ms * 1e6) == span["forward"]
        assert round(row.sampling_ms * 1e6) == span["sampling"]
        gap = (
            span["forward"]
            + span["sampling"]
            - union_length(forward, 0, 10**9)
            - union_length([(g, e) for _, g, e in sampling], 0, 10**9)
        )
        assert round(row.kernel_gap_ms * 1e6) == gap
    busy = [(g, e) for _, g, e, *_ in ops]
    for row in steps[steps.period_ms > 0].itertuples():  # random ops may start steps out of order
        lo, hi = row.gpu_start_ns, row.gpu_start_ns + round(row.period_ms * 1e6)
        assert round(row.busy_ms * 1e6) == union_length(busy, lo, hi)
