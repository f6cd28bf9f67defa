"""The loop policy on its own (core.loop, core.pipeline, core.scheduler): the tick's order, zombies,
late release, and each numbered invariant firing on a bad transition. No torch, no engine."""

from __future__ import annotations

import subprocess
import sys
from contextlib import nullcontext
from types import SimpleNamespace
from typing import Any

import pytest

from bubblelab.core.block_manager import BlockManager
from bubblelab.core.errors import InvariantError, OptionError
from bubblelab.core.loop import Loop
from bubblelab.core.pipeline import Pipeline, Step, StepKind, check_depth
from bubblelab.core.scheduler import Limits, Scheduler
from bubblelab.core.sequence import Sequence
from bubblelab.costmodel.schedule import Request, record


def seq(name: str = "a", constrained: bool = False, max_tokens: int = 8) -> Sequence:
    params = SimpleNamespace(max_tokens=max_tokens)
    return Sequence(name, [1, 2, 3], params, constraint="grammar" if constrained else None)


class Script:
    """A Work whose requests stop where `stops` says (request id -> tokens), logging every call."""

    def __init__(self, stops: dict[str, int]):
        self.stops = stops
        self.calls: list[tuple[str, Any]] = []

    def range(self, name: str, step: int) -> nullcontext:
        self.calls.append((name, step))
        return nullcontext()

    def launch(self, step: Step) -> None:
        pass

    def finalize(self, step: Step) -> None:
        pass

    def wait(self, step: Step) -> list[int]:
        return [7] * len(step.seqs)

    def accept(self, s: Sequence, token: int) -> str:
        self.calls.append(("accept", s.request_id))
        s.finalized = s.num_generated >= self.stops[s.request_id]
        return s.request_id

    def committed(self, step: Step) -> None:
        pass


def run(depth: int, seqs: list[Sequence], stops: dict[str, int]) -> tuple[Script, Scheduler]:
    script = Script(stops)
    scheduler = Scheduler(Limits(4, 64, 64), BlockManager(16, 4))
    for s in seqs:
        scheduler.add(s)
    loop = Loop(depth, scheduler, script, script, debug=True)
    while loop.busy():
        loop.tick()
    loop.pipeline.check_drained()
    scheduler.check_all_free()
    return script, scheduler


def phases(script: Script) -> list[tuple[str, int]]:
    return [c for c in script.calls if c[0] in ("plan", "launch", "finalize", "commit")]


# -- the tick -------------------------------------------------------------------------------------
def test_depth_1_commits_each_step_before_planning_the_next():
    script, _ = run(1, [seq("a")], {"a": 2})
    assert phases(script) == [
        ("plan", 0), ("launch", 0), ("finalize", 0), ("commit", 0),
        ("plan", 1), ("launch", 1), ("finalize", 1), ("commit", 1),
    ]  # fmt: skip


def test_depth_2_launches_the_next_step_before_committing_the_last():
    script, _ = run(2, [seq("a", max_tokens=3)], {"a": 3})
    assert phases(script) == [
        ("plan", 0), ("launch", 0), ("finalize", 0),  # one in flight: nothing to commit yet
        ("plan", 1), ("launch", 1), ("finalize", 1), ("commit", 0),
        ("plan", 2), ("launch", 2), ("finalize", 2), ("commit", 1),
        ("plan", 3), ("commit", 2),  # the cap is launched: nothing to plan, commit the last
    ]  # fmt: skip


def test_a_constrained_row_is_sampled_after_the_commit_before_it():
    script, _ = run(2, [seq("a", constrained=True, max_tokens=3)], {"a": 3})
    assert phases(script)[3:7] == [("plan", 1), ("launch", 1), ("commit", 0), ("finalize", 1)]


def test_a_zombie_row_is_skipped_and_its_pages_go_back_after_its_last_step():
    a, b = seq("a"), seq("b")
    script, scheduler = run(2, [a, b], {"a": 2, "b": 5})  # a stops on its own at 2 tokens
    assert a.output_ids == [7, 7] and b.output_ids == [7] * 5
    # a finished at step 1's commit, while step 2 (a decode of a and b) was in flight: its row there
    # is a zombie, so step 2's commit accepts b alone, and a's pages and row go back after it.
    accepted: dict[int, list[str]] = {}
    for name, arg in script.calls:
        if name == "commit":
            step = accepted.setdefault(arg, [])
        elif name == "accept":
            step.append(arg)
    assert accepted[1] == ["a", "b"] and accepted[2] == ["b"]
    assert a.finalized and a.inflight_refs == 0 and a.row is None and not a.block_table


# -- the invariants ------------------------------------------------------------------------------
def test_depth_is_checked_in_one_place():
    assert check_depth(1) == 1 and check_depth(2) == 2
    for bad in (0, 3):
        with pytest.raises(
            OptionError, match="depth must be 1 \\(blocking\\) or 2 \\(pipelined\\)"
        ):
            check_depth(bad)
        with pytest.raises(OptionError):
            Pipeline(bad)


def test_i1_launch_beyond_depth():
    p = Pipeline(1)
    p.launch(StepKind.DECODE, [seq()])
    with pytest.raises(InvariantError, match="I1: launch with 1 steps in flight"):
        p.launch(StepKind.DECODE, [seq("b")])


def test_i2_a_slot_held_twice_or_lost():
    p = Pipeline(2)
    p.free_slots.append(p.launch(StepKind.DECODE, [seq()]).slot)  # handed back while in flight
    with pytest.raises(InvariantError, match="I2: slot held twice"):
        p.launch(StepKind.DECODE, [seq("b")])
    p = Pipeline(2)
    p.free_slots.pop()
    with pytest.raises(InvariantError, match="I2: slot lost"):
        p.launch(StepKind.DECODE, [seq()])
    p = Pipeline(2)
    p.launch(StepKind.DECODE, [seq()])
    with pytest.raises(InvariantError, match="I2: pipeline not drained"):
        p.check_drained()


def test_i3_sampled_and_committed_oldest_first_sampled_before_committed():
    p = Pipeline(2)
    first, second = p.launch(StepKind.DECODE, [seq()]), p.launch(StepKind.DECODE, [seq("b")])
    with pytest.raises(InvariantError, match="I3: step 1 sampled out of launch order"):
        p.mark_sampled(second)
    with pytest.raises(InvariantError, match="I3: step 0 committed before its sampling"):
        p.retire(first)
    p.mark_sampled(first)
    p.mark_sampled(second)
    with pytest.raises(InvariantError, match="I3: step 1 committed out of order"):
        p.retire(second)
    p.retire(first)
    with pytest.raises(InvariantError, match="I3: step 1 sampled out of launch order"):
        p.mark_sampled(second)  # a second time


def test_i4_inflight_refs_bounded_and_in_sync():
    s = seq()
    s.inflight_refs = 1  # a reference no step in flight holds
    with pytest.raises(InvariantError, match="I4: inflight_refs 2 > depth 1"):
        Pipeline(1).launch(StepKind.DECODE, [s])
    s.inflight_refs = 0
    with pytest.raises(InvariantError, match="I4: inflight_refs out of sync"):
        p = Pipeline(2, debug=True)
        p.launch(StepKind.DECODE, [s])
        s.inflight_refs = 2
        p.launch(StepKind.DECODE, [seq("b")])
    p = Pipeline(1)
    step = p.launch(StepKind.DECODE, [s := seq()])
    p.mark_sampled(step)
    s.inflight_refs = 0
    with pytest.raises(InvariantError, match="I4: negative inflight_refs"):
        p.retire(step)


def test_i5_a_constrained_row_waits_for_the_commit_before():
    p = Pipeline(2)
    s = seq(constrained=True)
    first = p.launch(StepKind.DECODE, [s])
    assert p.ready_to_sample() == [first]
    p.mark_sampled(first)
    second = p.launch(StepKind.DECODE, [s])
    assert p.ready_to_sample() == []  # its mask needs the first step's commit
    with pytest.raises(InvariantError, match="I5: constrained row sampled before the previous"):
        p.mark_sampled(second)
    p.retire(first)
    assert p.ready_to_sample() == [second]
    p.mark_sampled(second)


def test_i7_pages_and_rows_go_back_once_and_only_when_released():
    blocks = BlockManager(4, 4)
    s = seq()
    blocks.allocate(s, 6)
    s.inflight_refs = 1
    with pytest.raises(InvariantError, match="I7: pages freed while 1 steps hold them"):
        blocks.free(s)
    s.inflight_refs = 0
    table = list(s.block_table)
    blocks.free(s)
    s.block_table = table
    with pytest.raises(InvariantError, match="I7: page .* freed twice"):
        blocks.free(s)
    with pytest.raises(InvariantError, match="I7: 5 pages asked of"):
        blocks.allocate(seq("b"), 20)
    scheduler = Scheduler(Limits(2), BlockManager(4, 4))
    scheduler.free_rows.pop()
    with pytest.raises(InvariantError, match="I7: batch rows leaked"):
        scheduler.check_all_free()
    blocks = BlockManager(4, 4)
    blocks.allocate(seq(), 4)
    with pytest.raises(InvariantError, match="I7: KV pages leaked"):
        blocks.check_all_free()


def test_invariants_fire_under_python_O():
    code = (
        "from bubblelab.core.pipeline import Pipeline, StepKind\n"
        "from bubblelab.core.sequence import Sequence\n"
        "p = Pipeline(1)\n"
        "p.launch(StepKind.DECODE, [])\n"
        "p.launch(StepKind.DECODE, [])\n"
    )
    done = subprocess.run([sys.executable, "-O", "-c", code], capture_output=True, text=True)
    assert done.returncode != 0 and "InvariantError: I1: launch with 1 steps" in done.stderr


def test_an_invariant_error_is_a_bug_not_a_user_mistake():
    from bubblelab.core.errors import BubblelabError

    error = InvariantError(6, "slot overwritten")
    assert isinstance(error, AssertionError) and not isinstance(error, BubblelabError)
    assert str(error) == "I6: slot overwritten" and error.number == 6


# -- the replay is this loop ---------------------------------------------------------------------
def test_the_replay_records_the_loops_event_log():
    recording = record([Request(4, 3, 3)], streams=1, depth=2, limits=Limits(8))
    script, _ = run(2, [seq("a", max_tokens=3)], {"a": 3})
    assert [(phase, step) for _, phase, step in recording.events] == [
        c for c in script.calls if c[0] != "accept"
    ]
    ticks = [tick for tick, phase, _ in recording.events if phase == "plan"]
    assert ticks == [0, 1, 2, 3]  # one plan a tick: a slot was free in every one
