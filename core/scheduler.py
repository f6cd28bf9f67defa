"""Continuous batching: waiting and running queues, admission, page growth, preemption (recompute).
Plain Python: the engine plans its steps with it, and the cost model's replay plans the same steps.

The scheduler plans step t+1 before step t is committed (depth 2), so it works from *launched*
lengths (Sequence.num_launched), never from committed ones, and never touches a sequence's pages or
batch row while a launched step still references it (inflight_refs > 0). Zombies (the post's
"finalize early, release late"): a finalized or preempted sequence gives its pages and row back in
`release_if_done`, the one place that rule lives, once no step in flight references it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from .block_manager import BlockManager
from .errors import InvariantError
from .pipeline import StepKind
from .sequence import Sequence, SequenceStatus


@dataclass(frozen=True)
class Limits:
    """The engine options that shape the schedule (engine.config.EngineConfig.limits)."""

    max_num_seqs: int
    max_num_batched_tokens: int = 8192
    max_model_len: int = 2048


@dataclass
class StepPlan:
    kind: StepKind
    seqs: list[Sequence]


class Scheduler:
    def __init__(self, limits: Limits, blocks: BlockManager):
        self.max_num_seqs = limits.max_num_seqs
        self.max_num_batched_tokens = limits.max_num_batched_tokens
        self.max_model_len = limits.max_model_len
        self.blocks = blocks
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []  # every sequence holding a row and pages, oldest first
        self.free_rows: deque[int] = deque(range(limits.max_num_seqs))
        self.num_preemptions = 0

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    # -- planning ----------------------------------------------------------------------------------
    def plan(self) -> StepPlan | None:
        """The next step: a prefill of newly admitted sequences if any fit, else a decode of the
        running."""
        admitted = self._admit()
        if admitted:
            return StepPlan(StepKind.PREFILL, admitted)
        batch: list[Sequence] = []
        page_tokens = self.blocks.block_size
        for seq in list(self.running):
            if not seq.schedulable or seq.num_launched >= self.max_model_len:
                continue
            # Most steps write inside the sequence's last page: nothing to reserve (hot: 128 rows).
            if len(seq.block_table) * page_tokens >= seq.num_launched or self._reserve_page(
                seq, batch
            ):
                batch.append(seq)
        for seq in batch:
            seq.num_launched += 1
        return StepPlan(StepKind.DECODE, batch) if batch else None

    def _admit(self) -> list[Sequence]:
        admitted: list[Sequence] = []
        if not (self.waiting and self.free_rows):
            return admitted
        tokens = 0
        # Pages the running sequences need for their next decode: kept, so admission does not force
        # preemption.
        reserve = sum(
            1
            for s in self.running
            if s.schedulable and s.num_launched % self.blocks.block_size == 0
        )
        while self.waiting and self.free_rows and not self._release_pending():
            seq = self.waiting[0]
            if admitted and tokens + seq.num_tokens > self.max_num_batched_tokens:
                break
            need = self.blocks.blocks_needed(seq, seq.num_tokens)
            if not self.blocks.can_allocate(need + reserve):
                break
            self.waiting.popleft()
            self.blocks.allocate(seq, seq.num_tokens)
            seq.row = self.free_rows.popleft()
            seq.status = SequenceStatus.RUNNING
            seq.num_launched = seq.num_tokens + 1  # the prefill samples position num_tokens
            self.running.append(seq)
            admitted.append(seq)
            tokens += seq.num_tokens
        return admitted

    def _release_pending(self) -> bool:
        """A preempted sequence is still in flight: its pages are coming back, so admit and preempt
        no more."""
        return any(s.preempted for s in self.running)

    def _reserve_page(self, seq: Sequence, batch: list[Sequence]) -> bool:
        """Makes sure the position this decode writes (num_launched - 1) has a page, preempting the
        youngest if needed."""
        need = self.blocks.blocks_needed(seq, seq.num_launched)
        while not self.blocks.can_allocate(need):
            if self._release_pending():
                return False  # sit this step out; pages return at the victim's commit
            victim = next(
                (
                    s
                    for s in reversed(self.running)
                    if s is not seq and not s.preempted and not s.finalized
                ),
                None,
            )
            if victim is None:
                return False
            if victim in batch:
                batch.remove(victim)
            self.preempt(victim)
        self.blocks.allocate(seq, seq.num_launched)
        return True

    # -- leaving the batch -------------------------------------------------------------------------
    def preempt(self, seq: Sequence) -> None:
        """Recompute later: the sequence leaves the batch now; its pages come back once nothing
        references them."""
        seq.preempted = True
        self.num_preemptions += 1
        self.release_if_done(seq)

    def abort(self, seq: Sequence) -> None:
        """Finishes a request early: a queued one leaves at once, a running one is a zombie until
        released."""
        seq.finalized, seq.finish_reason = True, "abort"
        if seq.status is SequenceStatus.WAITING:
            self.waiting.remove(seq)
            seq.status = SequenceStatus.FINISHED
        else:
            self.release_if_done(seq)

    def release_if_done(self, seq: Sequence) -> bool:
        """Zombie release: free the pages and row of a finalized or preempted sequence once no step
        in flight references it (inflight_refs == 0). A finalized one is finished; a preempted one
        queues for recompute. Called after every commit for the step's rows, on preemption and on
        abort. Giving back a page or a row that is still held would break I7 (core/pipeline.py)."""
        if seq.row is None or seq.inflight_refs or not (seq.finalized or seq.preempted):
            return False
        self.blocks.free(seq)
        self.free_rows.append(seq.row)
        seq.row = None
        self.running.remove(seq)
        if seq.finalized:
            seq.status = SequenceStatus.FINISHED
        else:  # preempted: recompute its committed tokens by a new prefill
            seq.preempted = False
            seq.num_launched = 0
            seq.status = SequenceStatus.WAITING
            self.waiting.appendleft(seq)
        return True

    def check_all_free(self) -> None:
        """I7 after a run: every batch row and KV page is back."""
        if len(self.free_rows) != self.max_num_seqs:
            raise InvariantError(7, "batch rows leaked")
        self.blocks.check_all_free()
