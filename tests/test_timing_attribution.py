"""The in-process timeline attributes the bubble to the host work that really ran: a synthetic run
whose answer is known (CPU device thread, a forward that takes FORWARD_S, host phases padded by
known sleeps)."""

from __future__ import annotations

import time

import pytest

from bubblelab.core.timeline import Timeline
from bubblelab.profiling import analysis
from bubblelab.profiling.catalog import connect
from bubblelab.profiling.ingest import ingest_timeline
from bubblelab.runs.driver import run_workload
from bubblelab.runs.workload import WorkloadSpec
from tests.engine_helpers import make_engine

FORWARD_S = 0.030  # the device's forward
PLAN_S, LAUNCH_S = (
    0.004,
    0.003,
)  # extra host time inside `plan` and inside `launch`, before the enqueue


def slowed(engine):
    model, runner, scheduler = engine.runner.model, engine.runner, engine.scheduler
    forward, launch, plan = model.forward, runner.launch, scheduler.plan

    def slow_forward(*args, **kwargs):  # runs on the device thread
        time.sleep(FORWARD_S)
        return forward(*args, **kwargs)

    def slow_launch(*args, **kwargs):
        time.sleep(LAUNCH_S)
        return launch(*args, **kwargs)

    def slow_plan():
        time.sleep(PLAN_S)
        return plan()

    model.forward, runner.launch, scheduler.plan = slow_forward, slow_launch, slow_plan
    return engine


@pytest.mark.parametrize("depth", [1, 2])
def test_timeline_attributes_the_bubble_to_plan_and_launch(tiny_llama, depth):
    engine = slowed(make_engine(tiny_llama, depth=depth))
    engine.timeline = engine.phases.timeline = Timeline()
    spec = WorkloadSpec(
        streams=2, requests=2, output_len_mean=14, output_len_dist="fixed", prompt_len=8
    )
    try:
        result = run_workload(engine, spec, warmup=False)
    finally:
        model = engine.runner.model
        del model.forward  # drop the instance attribute: the shared model keeps its own forward
        engine.close()
    con = connect(None)
    ingest_timeline(result.timeline, con, {"depth": depth}, run_id="synthetic")
    steady = analysis.steady_state(analysis.per_step(con, "synthetic"), warmup=2)
    assert len(steady) >= 5
    per_step = analysis.attribution(con, "synthetic", steady).set_index("phase").time_ms / len(
        steady
    )
    bubble = float(steady.bubble_ms.mean())
    if depth == 2:  # the host's 7 ms hide under the 30 ms forward
        assert bubble < 1.0, per_step
        return
    # Depth 1: the GPU idles while the host plans and launches the next step, and for little else.
    # The known answer is the time the host spent there (the injected sleeps, stretched by whatever
    # else the machine runs, as the host's own ranges measured it).
    plan_ms, launch_ms = (
        float(steady.plan_ms.mean()),
        float(steady.launch_ms.mean()),
    )  # per step, as above
    assert plan_ms >= PLAN_S * 1e3 and launch_ms >= LAUNCH_S * 1e3
    assert per_step.get("plan", 0) == pytest.approx(plan_ms, abs=0.5), per_step
    # Launch: idle until the forward is enqueued, the sleep at its start included.
    assert LAUNCH_S * 1e3 - 0.5 <= per_step.get("launch", 0) <= launch_ms + 0.5, per_step
    assert per_step.get("plan", 0) + per_step.get("launch", 0) >= 0.8 * bubble, per_step
    assert per_step.get("wait", 0) < 0.2 * bubble, (
        per_step
    )  # waking up is not where the bubble goes


def test_device_clock_anchor_moves_earlier_in_full_and_later_by_at_most_a_step():
    """A wake-up bounds the event's time from above: a mapping later than it is corrected at once,
    while a late wake-up (the thread was descheduled) moves the mapping by LATE_STEP_NS at most."""
    from bubblelab.engine.streams import CudaClock

    class Ref:  # a reference event whose elapsed time to an "event" is that event (in ms)
        def elapsed_time(self, event: float) -> float:
            return event

    clock = CudaClock.__new__(CudaClock)  # no CUDA here: the mapping alone
    clock.ref, clock.ref_ns, clock.anchored_us = Ref(), 0, []
    clock.anchor(1.0, woke_ns=990_000)  # mapped 1,000,000 ns, but the host woke at 990,000
    assert clock.to_host_ns(1.0) == 990_000
    clock.anchor(2.0, woke_ns=2_300_000)  # woke 310 us after the mapped time: mostly a late wake-up
    assert clock.to_host_ns(2.0) == 1_990_000 + CudaClock.LATE_STEP_NS
    assert clock.anchored_us == [-10.0, CudaClock.LATE_STEP_NS / 1e3]
