"""The serving loop's policy, the post's CUDA-free pipeline object: when to plan, launch, sample and
commit, what a zombie's commit does, when a finished sequence lets go of its pages and row.

One tick (`Loop.tick`):
  1. launch  if a slot is free (fewer than `depth` steps in flight), plan the next step and launch
             its forward;
  2. finalize enqueue the sampling of every step that may be sampled, oldest first; a constrained
             row only once the commit before it has made its mask current (I5);
  3. commit  when `depth` steps are in flight, or nothing was launched: wait for the oldest step's
             sampled ids and commit them; a finalized sequence's row is a zombie and is skipped;
             then release late: a finished (or preempted) sequence's pages and row go back once no
             step in flight references it (inflight_refs == 0);
  4. finalize again: what that commit made ready.
At depth 1 a tick becomes launch t, finalize t, commit t, because the step to commit is the one just
launched; at depth 2 it is launch t+1, commit t, finalize t+1.

The loop decides when; a `Work` does the work: the engine's GPUs (engine.llm_engine.LLMEngine), or
the cost model's replay, which records when each phase ran (costmodel.schedule). Both plan with the
same core.scheduler.Scheduler, so the replay runs the engine's own steps through this same object.
Every phase runs inside `phases.range(name, step id)`: NVTX ranges and the timeline for the engine,
the event log for the replay.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Generic, Protocol, TypeVar

from .pipeline import Pipeline, Step
from .scheduler import Scheduler
from .sequence import Sequence

Out = TypeVar("Out")  # what a commit gives back per row: the engine's RequestOutput
Out_co = TypeVar("Out_co", covariant=True)


class Work(Protocol[Out_co]):
    """What a tick drives, one call per phase of a step."""

    def launch(self, step: Step) -> None:
        """Enqueue the step's forward (fill its slot's inputs, one upload, the forward)."""

    def finalize(self, step: Step) -> None:
        """Enqueue its sampling (masks from committed state) and the copy of the ids back."""

    def wait(self, step: Step) -> list[int]:
        """Block until its sampled ids are on the host; one per row."""
        ...

    def accept(self, seq: Sequence, token: int) -> Out_co:
        """Commit one live row's token, already appended to seq.token_ids: set seq.finalized (and
        its finish_reason) if the request is done, and say so to the caller."""
        ...

    def committed(self, step: Step) -> None:
        """After the commit, outside its range: the step's device times, for the timeline."""


class PhaseRanges(Protocol):
    """Where each phase's range goes: engine.phases.Phases (NVTX, timeline), the replay's log."""

    def range(self, name: str, step: int) -> AbstractContextManager[object]: ...


class Loop(Generic[Out]):
    """The pipeline object: a Pipeline (slots, steps in flight, invariants) run by the scheduler's
    plans, one tick per call."""

    def __init__(
        self,
        depth: int,
        scheduler: Scheduler,
        work: Work[Out],
        phases: PhaseRanges,
        debug: bool = False,
    ):
        self.pipeline = Pipeline(depth, debug=debug)
        self.scheduler = scheduler
        self.work = work
        self.phases = phases

    def busy(self) -> bool:
        """Work is waiting, running or in flight."""
        return self.scheduler.has_work() or bool(self.pipeline.in_flight)

    def tick(self) -> list[Out]:
        """Launch the next step if a slot is free, sample what may be, commit the oldest; returns
        what the commit gave back, one per live row."""
        pipeline = self.pipeline
        launched = pipeline.can_launch() and self._launch()
        self._finalize_ready()
        if pipeline.in_flight and (pipeline.full or not launched):
            outputs = self._commit(pipeline.oldest())
            self._finalize_ready()
            return outputs
        if not launched and self.scheduler.has_work():
            raise RuntimeError("scheduler stalled: work waiting but nothing can be launched")
        return []

    def _launch(self) -> bool:
        with self.phases.range("plan", self.pipeline.next_step_id):
            plan = self.scheduler.plan()
        if plan is None:
            return False
        step = self.pipeline.launch(plan.kind, plan.seqs)
        with self.phases.range("launch", step.step_id):
            self.work.launch(step)
        return True

    def _finalize_ready(self) -> None:
        for step in self.pipeline.ready_to_sample():
            with self.phases.range("finalize", step.step_id):
                self.pipeline.mark_sampled(step)
                self.work.finalize(step)

    def _commit(self, step: Step) -> list[Out]:
        outputs = []
        with self.phases.range("commit", step.step_id):
            with self.phases.range("wait", step.step_id):
                tokens = self.work.wait(step)
            for seq, token in zip(step.seqs, tokens, strict=True):
                if seq.finalized:
                    continue  # a zombie: finished at an earlier commit, its token is dropped
                seq.token_ids.append(token)
                outputs.append(self.work.accept(seq, token))
            self.pipeline.retire(step)  # the slot's host buffer has been read: it may be reused
            for seq in step.seqs:
                self.scheduler.release_if_done(seq)  # release late
        self.work.committed(step)
        return outputs
