"""The decode pipeline's state machine: DecodeSlots, steps in flight and inflight_refs, in plain
Python (no CUDA).

`depth` bounds the steps in flight: 1 = blocking (launch t, sample t, commit t), 2 = pipelined
(launch t+1 while t is still being copied back and committed). Both depths run this same code; only
the bound differs.

Invariants, asserted on every transition (numbers appear in the assertion messages):
  I1  0 <= steps in flight <= depth <= number of slots (2).
  I2  every step in flight holds exactly one slot; a slot is held by at most one step;
      held + free = all.
  I3  steps are sampled and committed oldest first, each exactly once, sampled before committed.
  I4  0 <= seq.inflight_refs <= depth, and equals the number of steps in flight containing seq
      (checked in full in debug mode; cheaply for the sequences a transition touches otherwise).
  I5  a constrained sequence is sampled only once every older step containing it is committed
      (its mask comes from committed state: commit-before-finalize).
  I6  a slot returns to the free list only when the commit that reads its host buffer has finished.

The post's two words that look alike: `finalize` is the tick's third phase (enqueue a step's
sampling), while a sequence's `finalized` flag means it has finished (EOS, length cap, abort) and
takes no more tokens.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from enum import StrEnum
from typing import Generic, Protocol, TypeVar

NUM_SLOTS = 2  # ping-pong


class Tracked(Protocol):
    """What the pipeline reads and writes of a request: the engine's Sequence, or the cost model's
    replayed one."""

    inflight_refs: int
    constraint: object  # None for plain text: sampled as soon as launched


S = TypeVar("S", bound=Tracked)


class StepKind(StrEnum):
    """A prefill is just another kind of launch in the same pipeline (the post's kind="prefill")."""

    PREFILL = "prefill"
    DECODE = "decode"


@dataclass(eq=False)
class Step(Generic[S]):
    step_id: int
    kind: StepKind
    seqs: list[S]
    slot: int
    sampled: bool = False  # finalize has enqueued its sampling


class Pipeline(Generic[S]):
    def __init__(self, depth: int, debug: bool = False):
        assert 1 <= depth <= NUM_SLOTS, "I1: depth must fit the slots"
        self.depth = depth
        self.debug = debug
        self.free_slots: deque[int] = deque(range(NUM_SLOTS))
        self.in_flight: deque[Step[S]] = deque()
        self.next_step_id = 0

    # -- queries -----------------------------------------------------------------------------------
    def can_launch(self) -> bool:
        return len(self.in_flight) < self.depth

    @property
    def full(self) -> bool:
        return len(self.in_flight) == self.depth

    def oldest(self) -> Step[S]:
        return self.in_flight[0]

    def ready_to_sample(self) -> list[Step[S]]:
        """Unsampled steps whose sampling may be enqueued now, oldest first, until one must wait."""
        ready = []
        for step in self.in_flight:
            if step.sampled:
                continue
            if not all(s.constraint is None or s.inflight_refs == 1 for s in step.seqs):
                break  # I5: wait for the commit that makes the mask current
            ready.append(step)
        return ready

    # -- transitions -------------------------------------------------------------------------------
    def launch(self, kind: StepKind, seqs: list[S]) -> Step[S]:
        assert self.can_launch(), "I1: launch beyond depth"
        step = Step(self.next_step_id, kind, seqs, self.free_slots.popleft())
        self.next_step_id += 1
        for seq in seqs:
            seq.inflight_refs += 1
            assert seq.inflight_refs <= self.depth, f"I4: inflight_refs {seq.inflight_refs} > depth"
        self.in_flight.append(step)
        self._check()
        return step

    def mark_sampled(self, step: Step[S]) -> None:
        first_unsampled = next(s for s in self.in_flight if not s.sampled)
        assert step is first_unsampled, "I3: sampling out of launch order"
        assert all(s.constraint is None or s.inflight_refs == 1 for s in step.seqs), (
            "I5: constrained row sampled before the previous commit"
        )
        step.sampled = True

    def retire(self, step: Step[S]) -> None:
        """The commit of `step` has finished reading its slot: drops its references and frees the
        slot (I6)."""
        assert self.in_flight and step is self.in_flight[0], "I3: commit out of order"
        assert step.sampled, "I3: commit before sampling"
        self.in_flight.popleft()
        for seq in step.seqs:
            seq.inflight_refs -= 1
            assert seq.inflight_refs >= 0, "I4: negative inflight_refs"
        self.free_slots.append(step.slot)
        self._check()

    def _check(self) -> None:
        assert 0 <= len(self.in_flight) <= self.depth <= NUM_SLOTS, "I1"
        held = [s.slot for s in self.in_flight]
        assert len(set(held)) == len(held) and not set(held) & set(self.free_slots), (
            "I2: slot held twice"
        )
        assert len(held) + len(self.free_slots) == NUM_SLOTS, "I2: slot lost"
        if self.debug:
            counts: dict[int, int] = {}
            for step in self.in_flight:
                for seq in step.seqs:
                    counts[id(seq)] = counts.get(id(seq), 0) + 1
            for step in self.in_flight:
                for seq in step.seqs:
                    assert seq.inflight_refs == counts[id(seq)], "I4: inflight_refs out of sync"

    def check_drained(self) -> None:
        assert not self.in_flight and len(self.free_slots) == NUM_SLOTS, (
            "pipeline not drained: slots held"
        )
