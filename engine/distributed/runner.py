"""Rank 0's ModelRunner under tensor parallelism: the same three phases, each step also handed to
the workers.

launch fills the slot's packed inputs on the host, hands exactly those bytes to the workers (before
enqueueing its own forward, so the workers start as early as possible), then uploads and enqueues
like a single GPU. finalize fills the constrained-decoding mask from rank 0's committed state and
hands the rows over with the sampling order. Both hand over in forward_on_every_rank and
sample_on_every_rank, which the hand-over probe (engine.handoff_probe) calls too. wait is the
single-GPU wait, watched: it raises WorkerError when a worker dies or hangs. close ends the workers
and the process group (TPWorkers).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ...core.pipeline import Step
from ..config import EngineConfig
from ..decode_slot import DecodeSlot, LaunchRecord
from ..loader import LoadedModel
from ..model_runner import ModelRunner
from ..phases import Phases
from ..streams import Streams
from .workers import TPWorkers


class TPModelRunner(ModelRunner):
    def __init__(
        self, config: EngineConfig, loaded: LoadedModel, streams: Streams, workers: TPWorkers
    ):
        self.workers = workers
        workers.streams = streams  # drained at close, before the workers are told to stop
        try:
            super().__init__(config, loaded, streams)
        except Exception:  # a collective of the KV sizing or graph warm-up failed: a dead peer?
            workers.check_alive(grace_s=1.0)  # if so, WorkerError names it
            raise
        self.host_bytes = [slot.meta.host.numpy() for slot in self.slots]

    def _capture_graphs(self) -> None:
        self.workers.graphs = self.graphs  # released before the group is left, even mid-capture
        super()._capture_graphs()

    def forward_on_every_rank(self, slot: DecodeSlot, record: LaunchRecord, phases: Phases) -> None:
        with self._in_step():
            with phases.range("handoff", record.step_id):
                self.workers.send_launch(record, slot, self.host_bytes[slot.index])
            self.enqueue_forward(slot, record, phases)

    def sample_on_every_rank(
        self, slot: DecodeSlot, record: LaunchRecord, masked: bool, phases: Phases
    ) -> None:
        """The mask (filled by finalize from rank 0's committed state) travels with the order."""
        with self._in_step():
            with phases.range("handoff", record.step_id):
                self.workers.send_finalize(record, slot, masked)
            self.enqueue_sampling(slot, record, masked, phases)

    @contextmanager
    def _in_step(self) -> Iterator[None]:
        """A hand-over cut short leaves the workers with the order and rank 0 maybe without its
        device half: the ranks are out of step (TPWorkers.close then kills the workers)."""
        try:
            yield
        except BaseException:
            self.workers.out_of_step = True
            raise

    def drain(self) -> None:
        """Watched: a plain synchronize could wait on a dead peer for ever."""
        self.streams.drain(self.workers.watch("rank 0's queued work"))

    def wait(self, step: Step) -> list[int]:
        slot = self.slots[step.slot]
        try:
            self.streams.wait(slot.ev_copied, self.workers.watch(f"step {step.step_id}"))
        except RuntimeError:  # the CPU device thread's collective failed: a peer is gone
            self.workers.check_alive(grace_s=1.0)
            raise
        return slot.read_sampled(len(step.seqs), step.step_id)

    def close(self) -> None:
        """Rank 0's device work drains inside, watched: a plain synchronize could wait on a dead
        peer for ever."""
        self.workers.close()
