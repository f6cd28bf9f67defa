"""Which steps a run takes at a given depth: the engine's loop replayed on request lengths alone.

In a closed loop the step sequence does not depend on time: each tick plans, launches, commits and
finalizes in a fixed order, and the client sends a new request as soon as one finishes. So the
sequence of prefill and decode steps, and the rows in each, follow from the requests' prompt and
output lengths, the stream count, the depth and the engine's limits. Replaying it is how the cost
model sees what depth 2 does to admission (a finish is committed one tick later, so its
replacement's prefill moves one step later and admissions that were apart at depth 1 can merge), to
the end-of-run ramp-down, and to zombies (a request that stops on its own, not at its cap, rides one
more decode step).

The replay is the engine's own loop: core.loop.Loop over core.scheduler.Scheduler, the objects
LLMEngine.step drives, with a `Work` that launches nothing and records when each phase ran (the
event log simulate times) and a request finishing at its recorded length. The client is
runs/driver.py drive()'s closed loop; tests/test_costmodel_schedule.py checks the replay against the
engine itself, step by step. Assumed: the KV pool never runs short (no preemption).

With timed arrivals (a Poisson workload) the client may send a request only once it has arrived, so
the steps depend on time: how many ticks ran before each arrival. The replay then keeps a clock,
advanced each tick by a `TickClock` (the whole-run model's step costs), and admits what has arrived
by then, idling to the next arrival when nothing is left to run, as drive() does. A faster loop
cannot admit a request before it arrives.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass

import pandas as pd

from ..core.block_manager import BlockManager
from ..core.errors import BubblelabError
from ..core.loop import Loop
from ..core.pipeline import Step, check_depth
from ..core.scheduler import Limits, Scheduler
from ..core.sequence import Sequence as Seq

__all__ = ["STEP_COLUMNS", "Limits", "Recording", "Request", "TickClock", "extra_steps", "record",
           "replay"]  # fmt: skip


@dataclass(frozen=True)
class Request:
    prompt_len: int
    output_len: int  # tokens it produced, the prefill's sampled token included
    max_tokens: int  # its cap; output_len below it means it stopped on its own (EOS, grammar)
    constrained: bool = False  # sampled under a grammar mask: waits for the commit before (I5)
    arrival_ms: float = 0.0  # when the client may send it, from the run's start (0: closed loop)


STEP_COLUMNS = [
    "step", "kind", "batch_size", "tokens", "constrained", "zombies", "finished",
    "launch_tick", "sample_tick", "sample_late", "commit_tick", "serial",
]  # fmt: skip
# How long a tick takes (ms), from the (kind, rows) of the step it launched and of the step it
# committed (None: it launched or committed none), and whether they are one step (always at depth 1:
# its host and GPU work run in series).
Shape = tuple[str, int]
TickClock = Callable[[Shape | None, Shape | None, bool], float]
_GRAMMAR = "replayed grammar"  # a constrained row's constraint: the loop reads only that it has one
_NOTHING = nullcontext()


@dataclass
class Recording:
    """A replayed run: its steps (STEP_COLUMNS) and the loop's event log, one (tick, phase, step)
    per host phase in the order the loop ran them (plan, launch, finalize, commit, wait). idle_ms:
    the time the loop had nothing to run and waited for an arrival (timed arrivals only)."""

    steps: pd.DataFrame
    events: list[tuple[int, str, int]]
    idle_ms: float = 0.0


def replay(
    requests: Sequence[Request],
    streams: int,
    depth: int,
    limits: Limits,
    clock: TickClock | None = None,
) -> pd.DataFrame:
    """The step sequence of a run: one row per step (STEP_COLUMNS). clock: how long each tick
    takes, needed when requests arrive over time (record()).

    batch_size counts every row the step computes, zombies those whose request had already finished
    (rows computed, tokens dropped), finished the requests whose last token the step produced,
    tokens the prompt tokens of a prefill (its rows for a decode), constrained the rows under a
    grammar. The ticks say when the loop launched, sampled (sample_late: after that tick's commit,
    as a constrained row must) and committed each step; serial: the step was launched in a tick that
    began after the step before it had been committed, so nothing was queued on the GPU while the
    host planned it (always at depth 1; at depth 2 after a tick that had nothing to launch).
    """
    return record(requests, streams, depth, limits, clock).steps


def extra_steps(requests: Sequence[Request], streams: int, limits: Limits) -> float:
    """How many more steps depth 2 takes than depth 1 on the same closed-loop requests, as a share
    of depth 1's: a finish is committed a tick later, so its replacement's prefill comes a step
    later and merges with others less; measured 0.4% at 1 stream, ~1% at 32 and ~1.7% at 128 on
    4 requests a stream (docs/foreign-traces.md)."""
    one = len(replay(requests, streams, 1, limits))
    return len(replay(requests, streams, 2, limits)) / one - 1.0


def record(
    requests: Sequence[Request],
    streams: int,
    depth: int,
    limits: Limits,
    clock: TickClock | None = None,
) -> Recording:
    """replay()'s steps, and the event log of the loop that took them.

    Requests are sent in order, at most `streams` at a time, each once it has arrived: the time is
    the sum of the clock's ticks and of the waits for an arrival when nothing was left to run.
    """
    check_depth(depth)
    if clock is None and any(r.arrival_ms > 0 for r in requests):
        raise BubblelabError("requests that arrive over time need a clock to replay them")
    for r in requests:
        if not 1 <= r.output_len <= r.max_tokens:
            raise BubblelabError(f"a request cannot produce {r.output_len} tokens under its cap")
        if r.prompt_len + r.output_len > limits.max_model_len:
            raise BubblelabError(
                f"a request of {r.prompt_len} prompt tokens cannot produce {r.output_len} tokens "
                f"within max_model_len={limits.max_model_len}"
            )
    # One page per sequence and one to spare for each: the pool never runs short (no preemption).
    blocks = BlockManager(2 * limits.max_num_seqs, limits.max_model_len)
    scheduler = Scheduler(limits, blocks)
    work = _Recorder()
    loop = Loop(depth, scheduler, work, work)
    pending, active = deque(enumerate(requests)), 0
    now = idle = 0.0
    while pending or loop.busy():
        # The client tops the loop up before each tick with what has arrived (drive()).
        while pending and active < streams and pending[0][1].arrival_ms <= now:
            i, r = pending.popleft()
            grammar = _GRAMMAR if r.constrained else None
            scheduler.add(Seq(str(i), [0] * r.prompt_len, r, constraint=grammar))
            active += 1
        if not loop.busy():  # nothing to run: the client waits for the next arrival
            idle += pending[0][1].arrival_ms - now
            now = pending[0][1].arrival_ms
            continue
        launched = len(work.steps)  # the id of the step this tick launches, if it launches one
        active -= sum(loop.tick())
        if clock is not None:
            committed = work.committed_in(work.tick)
            now += clock(work.shape(launched), work.shape(committed), committed == launched)
        work.tick += 1
    return Recording(_steps(work.steps, work.events), work.events, idle)


class _Recorder:
    """The replay's work: no device, the loop's phases logged as they run, and each request
    finishing at its recorded length (its Request rides as the sequence's params)."""

    def __init__(self) -> None:
        self.tick = 0
        self.events: list[tuple[int, str, int]] = []
        self.steps: list[dict] = []
        self._committing: dict = {}

    def range(self, name: str, step: int) -> nullcontext:
        self.events.append((self.tick, name, step))
        return _NOTHING

    def shape(self, step: int | None) -> tuple[str, int] | None:
        """(kind, rows) of a step, None for none (a tick that launched nothing)."""
        if step is None or step >= len(self.steps):
            return None
        return self.steps[step]["kind"], self.steps[step]["batch_size"]

    def committed_in(self, tick: int) -> int | None:
        """The step this tick committed, if it committed one (the log's last commit)."""
        for t, phase, step in reversed(self.events):
            if t != tick:
                return None
            if phase == "commit":
                return step
        return None

    def launch(self, step: Step) -> None:
        rows = len(step.seqs)  # zombies until their commit says otherwise
        self.steps.append(dict(step=step.step_id, kind=step.kind.value, batch_size=rows,
                               tokens=step.tokens, constrained=len(step.constrained),
                               zombies=rows, finished=0))  # fmt: skip

    def finalize(self, step: Step) -> None:
        pass

    def wait(self, step: Step) -> list[int]:
        self._committing = self.steps[step.step_id]
        return [0] * len(step.seqs)

    def accept(self, seq: Seq, token: int) -> bool:
        self._committing["zombies"] -= 1
        seq.finalized = seq.num_generated >= seq.params.output_len
        self._committing["finished"] += seq.finalized
        return seq.finalized

    def committed(self, step: Step) -> None:
        pass


def _steps(steps: list[dict], events: list[tuple[int, str, int]]) -> pd.DataFrame:
    """The step table, with the ticks read off the event log."""
    committed_in = -1  # the tick of the latest commit
    for tick, phase, step in events:
        if phase == "launch":
            steps[step]["launch_tick"] = tick
        elif phase == "finalize":
            steps[step].update(sample_tick=tick, sample_late=committed_in == tick)
        elif phase == "commit":
            steps[step]["commit_tick"] = committed_in = tick
    table = pd.DataFrame(steps, columns=STEP_COLUMNS)
    committed = table["commit_tick"].shift(1, fill_value=-1)
    return table.assign(serial=table["launch_tick"] > committed)


def requests_from_table(requests: pd.DataFrame) -> list[Request]:
    """A run's `requests` table (docs/phases.md) as replay input, in the order they were sent; its
    arrival_s (when the workload had an arrival rate) as each request's arrival."""
    ordered = requests.sort_values("request")
    arrivals = ordered["arrival_s"] if "arrival_s" in ordered else pd.Series(0.0, ordered.index)
    return [
        Request(int(r.prompt_len), int(r.output_len), int(r.max_tokens), bool(r.constrained),
                float(arrival) * 1e3 if pd.notna(arrival) else 0.0)
        for r, arrival in zip(ordered.itertuples(), arrivals, strict=True)
    ]  # fmt: skip


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
