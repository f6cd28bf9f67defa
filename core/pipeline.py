"""The decode pipeline's state: DecodeSlots, steps in flight and inflight_refs, in plain Python (no
CUDA). core.loop.Loop drives it, one tick at a time; this module holds the state and checks every
transition.

`depth` bounds the steps in flight: 1 = blocking (launch t, sample t, commit t), 2 = pipelined
(launch t+1 while t is still being copied back and committed). Both depths run this same code; only
the bound differs, and `check_depth` is the one place that says which depths exist.

Invariants, checked on every transition (an InvariantError names the number):
  I1  0 <= steps in flight <= depth <= number of slots (2).
  I2  every step in flight holds exactly one slot; a slot is held by at most one step;
      held + free = all.
  I3  steps are sampled and committed oldest first, each exactly once, sampled before committed.
  I4  0 <= seq.inflight_refs <= depth, and equals the number of steps in flight containing seq
      (checked in full in debug mode; cheaply for the sequences a transition touches otherwise).
  I5  a constrained sequence is sampled only once every older step containing it is committed
      (its mask comes from committed state: commit-before-finalize).
  I6  a slot returns to the free list only when the commit that reads its host buffer has finished
      (the DecodeSlot's step-id tag checks it on the device side too).
  I7  a KV page or batch row is free or held by exactly one sequence, and goes back only when that
      sequence is released with inflight_refs == 0 (release late: Scheduler.release_if_done).

The post's two words that look alike: `finalize` is the tick's phase that enqueues a step's
sampling, while a sequence's `finalized` flag means it has finished (EOS, length cap, abort) and
takes no more tokens.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from enum import StrEnum

from .errors import InvariantError, OptionError
from .sequence import Sequence

NUM_SLOTS = 2  # ping-pong


def check_depth(depth: int) -> int:
    """The pipeline depth: 1 (blocking) or 2 (pipelined), the bound on steps in flight (I1)."""
    if depth not in (1, 2):
        raise OptionError("depth", "must be 1 (blocking) or 2 (pipelined)", depth)
    return depth


class StepKind(StrEnum):
    """A prefill is just another kind of launch in the same pipeline (the post's kind="prefill")."""

    PREFILL = "prefill"
    DECODE = "decode"


@dataclass(eq=False)
class Step:
    step_id: int
    kind: StepKind
    seqs: list[Sequence]
    slot: int
    tokens: int  # a prefill's prompt tokens, a decode's rows
    constrained: list[Sequence] = field(default_factory=list)  # rows under a grammar mask (I5)
    sampled: bool = False  # finalize has enqueued its sampling


class Pipeline:
    def __init__(self, depth: int, debug: bool = False):
        self.depth = check_depth(depth)
        self.debug = debug
        self.free_slots: deque[int] = deque(range(NUM_SLOTS))
        self.in_flight: deque[Step] = deque()
        self.next_step_id = 0

    # -- queries -----------------------------------------------------------------------------------
    def can_launch(self) -> bool:
        return len(self.in_flight) < self.depth

    @property
    def full(self) -> bool:
        return len(self.in_flight) == self.depth

    def oldest(self) -> Step:
        return self.in_flight[0]

    def ready_to_sample(self) -> list[Step]:
        """Unsampled steps whose sampling may be enqueued now, oldest first, until one must wait."""
        ready = []
        for step in self.in_flight:
            if step.sampled:
                continue
            if not all(s.inflight_refs == 1 for s in step.constrained):
                break  # I5: wait for the commit that makes the mask current
            ready.append(step)
        return ready

    # -- transitions -------------------------------------------------------------------------------
    def launch(self, kind: StepKind, seqs: list[Sequence]) -> Step:
        """Takes a free slot for a new step and a reference on each of its sequences (I1, I4)."""
        if not self.can_launch():
            raise InvariantError(1, f"launch with {len(self.in_flight)} steps in flight")
        tokens = sum(s.num_tokens for s in seqs) if kind is StepKind.PREFILL else len(seqs)
        step = Step(self.next_step_id, kind, seqs, self.free_slots.popleft(), tokens)
        self.next_step_id += 1
        for seq in seqs:
            seq.inflight_refs += 1
            if seq.inflight_refs > self.depth:
                raise InvariantError(4, f"inflight_refs {seq.inflight_refs} > depth {self.depth}")
            if seq.constraint is not None:
                step.constrained.append(seq)
        self.in_flight.append(step)
        self._check()
        return step

    def mark_sampled(self, step: Step) -> None:
        """Finalize enqueued the step's sampling: the oldest unsampled step (I3), and no constrained
        row whose previous step is still uncommitted (I5)."""
        first_unsampled = next((s for s in self.in_flight if not s.sampled), None)
        if step is not first_unsampled:
            raise InvariantError(3, f"step {step.step_id} sampled out of launch order")
        if not all(s.inflight_refs == 1 for s in step.constrained):
            raise InvariantError(5, "constrained row sampled before the previous commit")
        step.sampled = True

    def retire(self, step: Step) -> None:
        """The commit of `step` has finished reading its slot: drops its references and frees the
        slot. Oldest first, once sampled (I3); only now may the slot be reused (I6)."""
        if not self.in_flight or step is not self.in_flight[0]:
            raise InvariantError(3, f"step {step.step_id} committed out of order")
        if not step.sampled:
            raise InvariantError(3, f"step {step.step_id} committed before its sampling")
        self.in_flight.popleft()
        for seq in step.seqs:
            seq.inflight_refs -= 1
            if seq.inflight_refs < 0:
                raise InvariantError(4, "negative inflight_refs")
        self.free_slots.append(step.slot)
        self._check()

    def _check(self) -> None:
        """I1 and I2 after every transition; I4 in full in debug mode."""
        if not 0 <= len(self.in_flight) <= self.depth <= NUM_SLOTS:
            raise InvariantError(1, f"{len(self.in_flight)} steps in flight at depth {self.depth}")
        held = [s.slot for s in self.in_flight]
        if len(set(held)) != len(held) or set(held) & set(self.free_slots):
            raise InvariantError(2, "slot held twice")
        if len(held) + len(self.free_slots) != NUM_SLOTS:
            raise InvariantError(2, "slot lost")
        if self.debug:
            counts: dict[int, int] = {}
            for step in self.in_flight:
                for seq in step.seqs:
                    counts[id(seq)] = counts.get(id(seq), 0) + 1
            for step in self.in_flight:
                for seq in step.seqs:
                    if seq.inflight_refs != counts[id(seq)]:
                        raise InvariantError(4, "inflight_refs out of sync")

    def check_drained(self) -> None:
        """I2 after a run: no step in flight, both slots free."""
        if self.in_flight or len(self.free_slots) != NUM_SLOTS:
            raise InvariantError(2, "pipeline not drained: slots held")
