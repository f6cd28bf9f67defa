"""The schedule replay against the engine itself: the same steps (kind, rows) at depth 1 and 2, and
the same loop (its phases in the same order)."""

from dataclasses import replace

import numpy as np
import pytest

from bubblelab.core.errors import BubblelabError
from bubblelab.core.timeline import Timeline
from bubblelab.costmodel.costs import launched
from bubblelab.costmodel.schedule import Limits, Request, record, replay, requests_from_steps
from bubblelab.costmodel.simulate import simulate_run
from bubblelab.engine.sampling_params import SamplingParams
from bubblelab.runs import driver
from bubblelab.runs.driver import drive
from bubblelab.runs.workload import Request as Sent
from bubblelab.runs.workload import WorkloadSpec, arrival_times, make_requests
from tests.engine_helpers import make_engine

LOOP_PHASES = ["plan", "launch", "finalize", "commit", "wait"]


def engine_run(loaded, requests, streams, depth, **limits) -> tuple[Timeline, dict]:
    engine = make_engine(loaded, depth=depth, num_kv_blocks=4096, **limits)
    engine.timeline = engine.phases.timeline = Timeline()
    outputs, _ = drive(engine, requests, streams)
    engine.check_idle()
    return engine.timeline, outputs


def run_engine(loaded, requests, streams, depth, **limits):
    timeline, outputs = engine_run(loaded, requests, streams, depth, **limits)
    steps = timeline.steps_frame().sort_values("step")
    return list(zip(steps["kind"], steps["batch_size"], strict=True)), outputs


def loop_order(timeline: Timeline) -> list[tuple[str, int]]:
    """The engine's loop phases, (phase, step) in the order they began: the replay's event log."""
    host = timeline.host_frame()
    host = host[host["phase"].isin(LOOP_PHASES)].sort_values("start_ns", kind="stable")
    return list(zip(host["phase"], host["step"], strict=True))


def mixed_requests(n: int, seed: int) -> list[Sent]:
    """Prompts of 2-11 tokens; a third stop on their own (1 in 5 tokens), the rest at their cap."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        stop = tuple(range(0, 512, 5)) if i % 3 == 0 else ()
        params = SamplingParams(
            max_tokens=int(rng.integers(3, 20)), ignore_eos=not stop, stop_token_ids=stop
        )
        out.append(
            Sent(f"r{i}", rng.integers(10, 500, int(rng.integers(2, 12))).tolist(), params, 0)
        )
    return out


@pytest.mark.parametrize("depth", [1, 2])
@pytest.mark.parametrize(
    "streams, limits",
    [
        (1, dict(max_num_seqs=8)),
        (
            3,
            dict(max_num_seqs=8, max_num_batched_tokens=20),
        ),  # admissions split by the token budget
        (8, dict(max_num_seqs=8, max_num_batched_tokens=20)),  # rows full: zombies hold them a tick
    ],
)
def test_replay_takes_the_engines_steps(tiny_llama, depth, streams, limits):
    sent = mixed_requests(24, seed=3)
    engine_steps, outputs = run_engine(tiny_llama, sent, streams, depth, **limits)
    requests = [
        Request(len(r.prompt_ids), len(outputs[r.request_id]), r.params.max_tokens) for r in sent
    ]
    full = Limits(limits["max_num_seqs"], limits.get("max_num_batched_tokens", 8192), 128)
    schedule = replay(requests, streams, depth, full)
    assert list(zip(schedule["kind"], schedule["batch_size"], strict=True)) == engine_steps
    assert schedule["finished"].sum() == len(sent)
    if depth == 1:
        assert schedule["serial"].all() and schedule["zombies"].sum() == 0


class TickTime:
    """drive()'s clock (time.perf_counter, time.sleep) where each engine tick takes TICK_S: the
    engine then meets each arrival between the same two ticks as a replay timed by the same clock,
    whatever this machine's speed."""

    TICK_S = 2.0**-10  # a power of two: sums of ticks are exact

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def tick_ms(self, *_) -> float:
        return self.TICK_S * 1e3


@pytest.mark.parametrize("depth", [1, 2])
def test_replay_admits_each_request_once_it_has_arrived(tiny_llama, depth, monkeypatch):
    """Poisson arrivals (issue #25: the held-out arrivals sweep): the client sends a request only
    once it has arrived, so the steps depend on when each tick ran. Arrivals a few ticks apart,
    requests a dozen ticks long and 4 streams: the loop admits mid-run, queues and idles."""
    spec = WorkloadSpec(streams=4, requests=16, output_len_mean=12, prompt_len=6,
                        arrival_rate=200.0, seed=2)  # fmt: skip
    sent = make_requests(spec, tiny_llama.config.vocab_size)
    clock = TickTime()
    monkeypatch.setattr(driver, "time", clock)
    engine = make_engine(tiny_llama, depth=depth, num_kv_blocks=4096, max_num_seqs=8)
    engine.timeline = engine.phases.timeline = Timeline()
    tick = engine.step

    def timed_tick():
        clock.now += TickTime.TICK_S
        return tick()

    monkeypatch.setattr(engine, "step", timed_tick)
    outputs, _ = drive(engine, sent, spec.streams)
    engine.check_idle()
    steps = engine.timeline.steps_frame().sort_values("step")
    engine_steps = list(zip(steps["kind"], steps["batch_size"], strict=True))

    requests = [
        Request(len(r.prompt_ids), len(outputs[r.request_id]), r.params.max_tokens,
                arrival_ms=r.arrival_s * 1e3)
        for r in sent
    ]  # fmt: skip
    recording = record(requests, spec.streams, depth, Limits(8, 8192, 128), clock.tick_ms)
    schedule = recording.steps
    assert list(zip(schedule["kind"], schedule["batch_size"], strict=True)) == engine_steps
    assert recording.idle_ms > 0  # it did wait for an arrival with nothing to run
    # The same requests as a closed loop take other steps: the arrivals shaped this run.
    closed = replay([replace(r, arrival_ms=0.0) for r in requests], spec.streams, depth,
                    Limits(8, 8192, 128))  # fmt: skip
    assert len(closed) < len(schedule)
    # The workload's own arrivals, regenerated from its seed (older results lack arrival_s).
    assert arrival_times(spec).tolist() == [r.arrival_s for r in sent]


def test_timed_arrivals_need_a_clock():
    with pytest.raises(BubblelabError, match="need a clock"):
        record([Request(4, 2, 2, arrival_ms=5.0)], 1, 2, Limits(8, 8192, 128))


@pytest.mark.parametrize("depth", [1, 2])
def test_the_engine_runs_the_phases_the_replay_logged(tiny_llama, depth):
    """One loop: the engine's host phases (plan, launch, finalize, commit, wait) come in the order,
    and for the steps, of the replay's event log."""
    sent = mixed_requests(12, seed=5)
    timeline, outputs = engine_run(tiny_llama, sent, 3, depth, max_num_seqs=8,
                                   max_num_batched_tokens=20)  # fmt: skip
    requests = [
        Request(len(r.prompt_ids), len(outputs[r.request_id]), r.params.max_tokens) for r in sent
    ]
    events = record(requests, 3, depth, Limits(8, 20, 128)).events
    assert loop_order(timeline) == [(phase, step) for _, phase, step in events]


@pytest.mark.parametrize("depth", [1, 2])
def test_the_simulation_times_the_replays_event_log(depth):
    """simulate plays the loop's own phases, in the loop's order, rather than re-deriving them."""
    run = simulate_run(depth, streams=4, requests=12, output_len=6, stop_share=0.5, seed=1)
    host = run["timeline"][run["timeline"]["lane"] == "host"]
    played = [(p, i) for p, i in zip(host["phase"], host["step"], strict=True) if p != "wait"]
    reqs = run["requests"]
    events = record(
        [Request(r.prompt_len, r.output_len, r.max_tokens) for r in reqs.itertuples()],
        4, depth, Limits(8, 8192, 4096),
    ).events  # fmt: skip
    assert played == [(phase, step) for _, phase, step in events if phase != "wait"]


def test_constrained_rows_sample_after_the_commit_and_ride_as_zombies(tiny_llama):
    spec = WorkloadSpec(
        streams=8, requests=32, output_len_mean=40, prompt_len=8, constraint="detect",
        constrained_share=1.0,
    )  # fmt: skip
    sent = make_requests(spec, tiny_llama.config.vocab_size)
    for depth in (1, 2):
        timeline, outputs = engine_run(tiny_llama, sent, 8, depth, max_num_seqs=32,
                                       max_model_len=256)  # fmt: skip
        engine_steps = timeline.steps_frame().sort_values("step")
        requests = [Request(8, len(outputs[r.request_id]), r.params.max_tokens, True) for r in sent]
        recording = record(requests, 8, depth, Limits(32, 8192, 256))
        schedule = recording.steps
        assert list(zip(schedule["kind"], schedule["batch_size"], strict=True)) == list(
            zip(engine_steps["kind"], engine_steps["batch_size"], strict=True)
        )
        assert loop_order(timeline) == [(phase, step) for _, phase, step in recording.events]
    # Depth 2: every grammar stop rides one more decode step; a decode's sampling waits for the
    # commit.
    assert schedule["zombies"].sum() == 32
    decodes = schedule[schedule["kind"] == "decode"].iloc[1:]
    assert decodes["sample_late"].all() and not decodes["serial"].any()


def test_at_one_stream_an_admission_waits_for_the_finish_at_both_depths():
    """A capped request is never launched past its cap, so depth 2 has nothing to launch in the tick
    after
    its last step: the next prefill is planned after that step's commit, like depth 1's (serial)."""
    requests = [Request(4, 3, 3), Request(4, 2, 2)]
    schedule = replay(requests, 1, 2, Limits(8))
    assert list(schedule["kind"]) == ["prefill", "decode", "decode", "prefill", "decode"]
    assert schedule["serial"].tolist() == [True, False, False, True, False]
    assert schedule["zombies"].sum() == 0


def test_replay_refuses_lengths_over_the_cap():
    with pytest.raises(BubblelabError, match="cannot produce 5 tokens"):
        replay([Request(4, 5, 3)], 1, 1, Limits(8))
    with pytest.raises(BubblelabError, match="cannot produce 30 tokens within max_model_len=128"):
        replay([Request(100, 30, 30)], 1, 1, Limits(8, 8192, 128))  # the engine stops at 28
    with pytest.raises(BubblelabError, match=r"depth must be 1 \(blocking\) or 2"):
        replay([Request(4, 3, 3)], 1, 3, Limits(8))


def test_request_lengths_read_off_a_depth_one_sequence_reproduce_it():
    rng = np.random.default_rng(0)
    requests = [Request(16, int(n), int(n)) for n in rng.integers(5, 40, 48)]
    schedule = replay(requests, 8, 1, Limits(8))
    found = requests_from_steps(schedule, 16, [1000] * 48, constrained=False)
    again = replay(found, 8, 1, Limits(8))
    assert list(zip(again["kind"], again["batch_size"], strict=True)) == list(
        zip(schedule["kind"], schedule["batch_size"], strict=True)
    )
    assert sum(r.output_len for r in found) == sum(r.output_len for r in requests)


def test_a_tick_that_planned_nothing_leaves_no_step():
    import pandas as pd

    steps = pd.DataFrame({"step": [1, 0, 2], "kind": ["decode", "prefill", None]})
    assert launched(steps)["step"].tolist() == [0, 1]
