"""Which steps a run takes at a given depth: the engine's loop replayed on request lengths alone.

In a closed loop the step sequence does not depend on time: each tick plans, launches, commits and
finalizes in a fixed order, and the client sends a new request as soon as one finishes. So the
sequence of prefill and decode steps, and the rows in each, follow from the requests' prompt and
output lengths, the stream count, the depth and the engine's limits. Replaying it is how the cost
model sees what depth 2 does to admission (a finish is committed one tick later, so its
replacement's prefill moves one step later and admissions that were apart at depth 1 can merge), to
the end-of-run ramp-down, and to zombies (a request that stops on its own, not at its cap, rides one
more decode step).

The rules are the engine's (engine/llm_engine.py step(), engine/scheduler.py plan(),
runs/driver.py drive()); tests/test_costmodel_schedule.py checks the replay against the engine
itself, step by step. Assumed: the KV pool never runs short (no preemption), every request arrives
at once (closed loop).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from ..core.errors import BubblelabError


@dataclass(frozen=True)
class Request:
    prompt_len: int
    output_len: int  # tokens it produced, the prefill's sampled token included
    max_tokens: int  # its cap; output_len below it means it stopped on its own (EOS, grammar)
    constrained: bool = False  # sampled under a grammar mask: waits for the commit before (I5)


@dataclass(frozen=True)
class Limits:
    """The engine options that shape the schedule (engine.config.EngineConfig)."""

    max_num_seqs: int
    max_num_batched_tokens: int = 8192
    max_model_len: int = 2048


STEP_COLUMNS = [
    "step", "kind", "batch_size", "tokens", "constrained", "zombies", "finished",
    "launch_tick", "sample_tick", "sample_late", "commit_tick", "serial",
]  # fmt: skip


@dataclass(eq=False)
class _Seq:
    req: Request
    launched: int = 0  # tokens launched (generated positions in flight or committed)
    produced: int = 0
    finalized: bool = False
    refs: int = 0  # steps in flight that hold it (inflight_refs)

    def schedulable(self, max_model_len: int) -> bool:
        return (
            not self.finalized
            and self.launched < self.req.max_tokens
            and self.req.prompt_len + self.launched < max_model_len
        )


def replay(requests: Sequence[Request], streams: int, depth: int, limits: Limits) -> pd.DataFrame:
    """The step sequence of a closed-loop run: one row per step (STEP_COLUMNS).

    batch_size counts every row the step computes, zombies those whose request had already finished
    (rows computed, tokens dropped), finished the requests whose last token the step produced,
    tokens the prompt tokens of a prefill (its rows for a decode), constrained the rows under a
    grammar. The ticks say when the loop launched, sampled (sample_late: after that tick's commit,
    as a constrained row must) and committed each step; serial: the step was launched in a tick that
    began after the step before it had been committed, so nothing was queued on the GPU while the
    host planned it (always at depth 1; at depth 2 after a tick that had nothing to launch).
    """
    if depth not in (1, 2):
        raise BubblelabError(f"depth must be 1 or 2, got {depth}")
    if bad := [r for r in requests if not 1 <= r.output_len <= r.max_tokens]:
        raise BubblelabError(f"a request cannot produce {bad[0].output_len} tokens under its cap")
    loop = _Loop(limits)
    pending, active, tick = deque(requests), 0, 0
    while pending or loop.busy():
        while pending and active < streams:  # the client tops the loop up before each tick
            loop.waiting.append(_Seq(pending.popleft()))
            active += 1
        launched = len(loop.in_flight) < depth and loop.launch(tick)
        loop.sample(tick, late=False)
        if loop.in_flight and (len(loop.in_flight) == depth or not launched):
            active -= loop.commit(tick)
            loop.sample(tick, late=True)
        elif not launched:
            raise BubblelabError("schedule replay stalled: work waiting but nothing can run")
        tick += 1
    steps = pd.DataFrame(loop.steps, columns=STEP_COLUMNS)
    committed = steps["commit_tick"].shift(1, fill_value=-1)
    return steps.assign(serial=steps["launch_tick"] > committed)


class _Loop:
    """The engine's scheduler and pipeline on abstract sequences: plan, launch, sample, commit."""

    def __init__(self, limits: Limits):
        self.limits = limits
        self.waiting: deque[_Seq] = deque()
        self.running: list[_Seq] = []
        self.in_flight: deque[tuple[dict, list[_Seq]]] = deque()
        self.free_rows = limits.max_num_seqs
        self.steps: list[dict] = []

    def busy(self) -> bool:
        return bool(self.waiting or self.running or self.in_flight)

    def launch(self, tick: int) -> bool:
        """Plan the next step: admit waiting requests into a prefill, else decode those running."""
        admitted: list[_Seq] = []
        tokens = 0
        while self.waiting and self.free_rows:
            seq = self.waiting[0]
            if admitted and tokens + seq.req.prompt_len > self.limits.max_num_batched_tokens:
                break
            self.waiting.popleft()
            self.free_rows -= 1
            seq.launched = 1  # the prefill samples the first generated token
            self.running.append(seq)
            admitted.append(seq)
            tokens += seq.req.prompt_len
        if admitted:
            kind, rows = "prefill", admitted
        else:
            kind, tokens = "decode", 0
            rows = [s for s in self.running if s.schedulable(self.limits.max_model_len)]
            for seq in rows:
                seq.launched += 1
            if not rows:
                return False
        for seq in rows:
            seq.refs += 1
        step = dict(step=len(self.steps), kind=kind, batch_size=len(rows), launch_tick=tick,
                    tokens=tokens or len(rows), zombies=0, finished=0,
                    constrained=sum(s.req.constrained for s in rows))  # fmt: skip
        self.steps.append(step)
        self.in_flight.append((step, rows))
        return True

    def sample(self, tick: int, late: bool) -> None:
        """Enqueue sampling, oldest first, up to the first step with a constrained row another step
        in
        flight still holds (its mask needs that step's commit: I5)."""
        for step, rows in self.in_flight:
            if "sample_tick" in step:
                continue
            if any(s.req.constrained and s.refs > 1 for s in rows):
                break
            step.update(sample_tick=tick, sample_late=late)

    def commit(self, tick: int) -> int:
        """Commit the oldest step; returns how many requests it finished."""
        step, rows = self.in_flight.popleft()
        for seq in rows:
            if seq.finalized:  # a zombie: its row was computed, its token is dropped
                step["zombies"] += 1
                continue
            seq.produced += 1
            if seq.produced >= seq.req.output_len:
                seq.finalized = True
                step["finished"] += 1
        for seq in rows:  # release late: a finished row leaves once no step in flight holds it
            seq.refs -= 1
            if seq.finalized and seq.refs == 0:
                self.running.remove(seq)
                self.free_rows += 1
        step["commit_tick"] = tick
        return step["finished"]


def requests_from_table(requests: pd.DataFrame) -> list[Request]:
    """A run's `requests` table (docs/phases.md) as replay input, in the order they were sent."""
    ordered = requests.sort_values("request")
    return [
        Request(int(r.prompt_len), int(r.output_len), int(r.max_tokens), bool(r.constrained))
        for r in ordered.itertuples()
    ]


def requests_from_steps(
    steps: pd.DataFrame, prompt_len: int, max_tokens: Sequence[int], constrained: bool
) -> list[Request]:
    """The requests a depth-1 run's step sequence implies, when they were not recorded (an older run
    directory): admitted in the order sent, the oldest finishing first when a decode step has fewer
    rows than were running. It reproduces the depth-1 sequence; which request produced which length
    is a guess (exact when requests admitted together finish together, as under a grammar's fixed
    shape), so a cap it contradicts is raised to the guessed length, and the replay's check against
    depth 2 (same_schedule) shows what the guess cost.
    """
    running: deque[list[int]] = deque()  # [request, tokens produced], oldest first
    lengths: dict[int, int] = {}
    admitted = 0
    for kind, rows in zip(steps["kind"], steps["batch_size"], strict=True):
        rows = int(rows)
        if kind == "prefill":
            running.extend([admitted + i, 0] for i in range(rows))
            admitted += rows
        while kind == "decode" and len(running) > rows:  # these finished before this decode
            request, produced = running.popleft()
            lengths[request] = produced
        for row in list(running)[-rows:] if kind == "prefill" else running:
            row[1] += 1
    lengths.update({request: produced for request, produced in running})
    return [
        Request(prompt_len, lengths[i], max(int(max_tokens[i]), lengths[i]), constrained)
        for i in range(admitted)
    ]
