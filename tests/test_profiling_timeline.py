"""The in-process Timeline yields the same per-step table as an nsys trace of the same run."""

from __future__ import annotations

import pandas as pd
import pytest

from bubblelab.core.timeline import StepInfo, Timeline
from bubblelab.engine.phases import Phases
from bubblelab.profiling import analysis
from bubblelab.profiling.catalog import connect
from bubblelab.profiling.ingest import ingest
from testing.synthetic_trace import COMPUTE, TraceBuilder, us

# (phase, start, end) in us relative to the tick; device work: (phase, start, end)
HOST = [
    ("plan", 0, 40),
    ("launch", 40, 120),
    ("forward", 60, 110),
    ("finalize", 120, 170),
    ("sampling", 130, 150),
    ("commit", 170, 330),
    ("wait", 175, 300),
]
DEVICE = [("forward", 100, 260), ("sampling", 260, 290)]
TICK = 350


def same_run_twice(tmp_path, launch_gap: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One blocking run of 4 decode steps written both as an nsys export and as a Timeline. With a
    launch gap, nsys sees the forward as two kernels `launch_gap` us apart; the timeline (CUDA
    events) only its span."""
    b, tl = TraceBuilder(), Timeline(depth=1)
    for k in range(4):
        t = 5000 + TICK * k
        for name, start, end in HOST:
            b.range(name, k, t + start, t + end)
            tl.add_host(name, k, us(t + start), us(t + end))
        b.mark(k, "kind=decode bs=3 tokens=3 depth=1", t + 40)
        tl.add_step(StepInfo(step=k, kind="decode", batch_size=3, tokens=3))
        for name, start, end in DEVICE:  # one kernel per device interval, launched inside its range
            launched_at = t + dict((h[0], h[1]) for h in HOST)[name] + 1
            cut = (start + end) // 2 if name == "forward" and launch_gap else end
            b.kernel(name, launched_at, t + start, t + cut, stream=COMPUTE)
            if cut < end:
                b.kernel(name, launched_at + 1, t + cut + launch_gap, t + end, stream=COMPUTE)
            tl.add_device(name, k, us(t + start), us(t + end))
    con = connect(None)
    nsys_run = ingest(b.write(tmp_path / "run.sqlite"), None, {}, con=con)
    return analysis.per_step(con, nsys_run), analysis.per_step_from_timeline(
        tl, "timeline-run", depth=1
    )


def test_timeline_matches_nsys(tmp_path):
    from_nsys, from_timeline = same_run_twice(tmp_path)
    assert list(from_timeline.columns) == list(from_nsys.columns)
    assert from_timeline.run_id.unique().tolist() == ["timeline-run"]
    pd.testing.assert_frame_equal(
        from_timeline.drop(columns="run_id"), from_nsys.drop(columns="run_id")
    )
    # and the values are the hand-computed ones: busy 190 us of a 350 us period
    assert from_timeline.forward_ms.tolist() == pytest.approx([0.16] * 4)
    assert from_timeline.sampling_ms.tolist() == pytest.approx([0.03] * 4)
    assert from_timeline.bubble_ms[:3].tolist() == pytest.approx([0.16] * 3)
    assert from_timeline.period_ms[:3].tolist() == pytest.approx([0.35] * 3)
    assert from_timeline.wait_ms.tolist() == pytest.approx([0.125] * 4)


def test_launch_gaps_are_kernel_gap_not_bubble(tmp_path):
    """Spans make both paths agree on forward, sampling, bubble and period; only nsys sees the gaps
    inside."""
    from_nsys, from_timeline = same_run_twice(tmp_path, launch_gap=10)
    same = [
        "step",
        "kind",
        "forward_ms",
        "sampling_ms",
        "bubble_ms",
        "period_ms",
        "wait_ms",
        "gpu_start_ns",
    ]
    pd.testing.assert_frame_equal(from_timeline[same], from_nsys[same])
    assert from_nsys.kernel_gap_ms.tolist() == pytest.approx([0.01] * 4)
    assert from_timeline.kernel_gap_ms.tolist() == [0.0] * 4
    assert (from_timeline.busy_ms - from_nsys.busy_ms)[:3].tolist() == pytest.approx([0.01] * 3)


def test_phases_feed_the_timeline():
    tl = Timeline(depth=2)
    phases = Phases(timeline=tl)
    phases.step_meta(StepInfo(step=0, kind="decode", batch_size=1, tokens=1), depth=2)
    with phases.range("launch", 0):
        with phases.range("forward", 0):
            pass
    t0 = tl.host[0][2]
    tl.add_device("forward", 0, t0, t0 + 1000)
    df = analysis.per_step_from_timeline(tl, "r", depth=2)
    assert df[["step", "kind", "depth", "batch_size", "forward_ms"]].values.tolist() == [
        [0, "decode", 2, 1, 0.001]
    ]
    assert df.launch_ms[0] > 0 and pd.isna(df.period_ms[0])
