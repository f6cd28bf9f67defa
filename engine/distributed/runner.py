"""Rank 0's ModelRunner under tensor parallelism: the same three phases, each step also handed to
the workers.

launch fills the slot's packed inputs on the host, hands exactly those bytes to the workers (before
enqueueing its own forward, so the workers start as early as possible), then uploads and enqueues
like a single GPU. finalize fills the constrained-decoding mask from rank 0's committed state and
hands the rows over with the sampling order. wait is the single-GPU wait, watched: it raises
WorkerError when a worker dies or hangs. close ends the workers and the process group (TPWorkers).
"""

from __future__ import annotations

from ...core.block_manager import BlockManager
from ...core.errors import InvariantError
from ...core.pipeline import Step
from ..config import EngineConfig
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

    def launch(self, step: Step, blocks: BlockManager, phases: Phases) -> None:
        slot = self.slots[step.slot]
        record = self.fill_launch(step, slot, blocks)
        try:
            with phases.range("handoff", step.step_id):
                self.workers.send_launch(record, slot, self.host_bytes[slot.index])
            self.enqueue_forward(slot, record, phases)
        except (
            BaseException
        ):  # the workers have the step, rank 0 may not: the ranks are out of step
            self.workers.out_of_step = True
            raise

    def finalize(self, step: Step, phases: Phases) -> None:
        slot, record = self.slots[step.slot], self.slots[step.slot].record
        if record is None or record.step_id != step.step_id:
            raise InvariantError(2, f"slot {slot.index} holds the record of another step")
        masked = any(s.constraint is not None for s in step.seqs)
        if masked:
            with phases.range("mask", step.step_id):
                slot.fill_mask(step.seqs)
                self.enqueue_mask(slot, record.rows)
        try:
            with phases.range("handoff", step.step_id):
                self.workers.send_finalize(record, slot, masked)
            self.enqueue_sampling(slot, record, masked, phases)
        except BaseException:
            self.workers.out_of_step = True
            raise

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
