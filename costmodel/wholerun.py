"""Whole-run model: the pipelined run's wall clock, from a schedule of steps and measured step
costs.

The per-step ratio T_block / T_pipe describes the steady state only. A run also has prefills,
admission and an end-of-run ramp-down, and at a few ms per step those are a visible slice of the
wall (the post's B200 32-stream row). So the model sums a depth-2 period per step of a schedule:

    wall_2 = overhead + host_0 + Σ_t max(gpu_t + handoff, host_t+1) + (gpu + host of the last step)

- gpu_t: the GPU work of step t that its own launch does not pace (costs.own_gpu_ms), by kind and
  batch size.
- host_t+1: the host work of the tick that launches step t+1 (costs.tick_host_ms). Depth 2 launches
  t+1 while the GPU runs t, so step t lasts the slower of the two. The next tick, not t's own: a
  long prefill launch hides the decode step before it.
- handoff: the GPU's own idle between two queued steps (depth 2's leftover bubble, ~0.01 ms).
- host_0: the first tick, which nothing overlaps; a step launched after a tick that had nothing to
  launch (serial, from the replay) waits for the commit before it: gpu_t + host_t+1 less its
  finalize (which runs once the step's GPU work has started).
- overhead: the wall clock outside the steps (start-up, the last commit), per run.

Two predictions of one depth-1 / depth-2 pair, both from measured pieces, neither fitted to a
speedup:

- from depth 1 alone: the depth-2 schedule replayed from the requests (costmodel.schedule: admission
  one tick later, merged prefills, the ramp-down, zombies), costed with the depth-1 run's pieces;
- the model: the schedule depth 2 ran, costed with the depth-2 run's own pieces (its GPU spans, host
  ticks, hand-over and overhead): what a depth-2 forward tax, a faster or slower host, or a longer
  start-up did.

The gap between the two is split into terms (WholeRun.terms_pts), each one measured piece swapped
in.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from ..core.errors import BubblelabError
from .costs import RunCosts, launched
from .schedule import Limits, Request, Shape, TickClock, record

# The terms between the two predictions, in the order they are swapped in (WholeRun.terms_pts).
TERMS = ("admission", "replay", "forward", "host", "handoff", "overhead")


def pipelined_wall_ms(schedule: pd.DataFrame, costs: RunCosts, tail: bool = True) -> float:
    """Depth-2 wall clock of a schedule (kind and batch_size per step, in launch order).

    tail: add the first tick, the last step's GPU and host work and the run's overhead (a whole
    run); without it, just the periods (a window)."""
    kinds, sizes = schedule["kind"].to_numpy(), schedule["batch_size"].to_numpy()
    gpu, host = costs.step_gpu(kinds, sizes), costs.step_host(kinds, sizes)
    overlapped = np.maximum(gpu[:-1] + costs.handoff_ms, host[1:])
    if "serial" in schedule:  # nothing queued while the next step was planned: host after GPU
        exposed = costs.step_exposed(kinds, sizes)
        overlapped = np.where(schedule["serial"].to_numpy()[1:], gpu[:-1] + exposed[1:], overlapped)
    periods = float(overlapped.sum())
    return periods + (costs.overhead_ms + host[0] + gpu[-1] + host[-1] if tail else 0.0)


def depth2_order(steps: pd.DataFrame) -> pd.DataFrame:
    """When the requests are not known (a trimmed trace): depth 1's steps in the order depth 2 runs
    them, each admission one tick after its finishes.

    The rows that finish at decode m are committed in tick m at depth 1, so their prefill is step
    m+1; at depth 2 tick m+1 launches the next step before it commits m, so that prefill comes one
    decode later. Prefills before the first decode wait for no finish and stay put.
    """
    ordered = steps.sort_values("step")
    decodes: list = []
    admissions: dict = {}  # decode index -> the prefills after it
    cause = None
    for i, kind in zip(ordered.index, ordered["kind"], strict=True):
        if kind == "decode":
            decodes.append(i)
            cause = i
        else:
            admissions.setdefault(cause, []).append(i)
    order = list(admissions.pop(None, []))
    ready: list[tuple[int, list]] = []  # (position it can take, prefills), in order
    for d in decodes:
        while ready and ready[0][0] <= len(order):
            order.extend(ready.pop(0)[1])
        order.append(d)
        if d in admissions:
            ready.append((len(order) + 1, admissions[d]))
    for _, prefills in ready:
        order.extend(prefills)
    return ordered.loc[order]


def tick_clock(costs: RunCosts) -> TickClock:
    """How long a replayed tick takes, costed with a run's pieces: the host work of the step it
    launches and the GPU work of the step it commits, overlapped (depth 2: it launches t+1 while
    the GPU runs t), or one after the other when they are one step (depth 1), less the finalize that
    runs once the step's GPU work has started (pipelined_wall_ms's serial step)."""

    def tick_ms(launched: Shape | None, committed: Shape | None, same: bool) -> float:
        gpu = float(costs.step_gpu([committed[0]], [committed[1]])[0]) if committed else 0.0
        if launched is None:
            return gpu
        if same:
            return gpu + float(costs.step_exposed([launched[0]], [launched[1]])[0])
        host = float(costs.step_host([launched[0]], [launched[1]])[0])
        return max(host, gpu + costs.handoff_ms if committed else 0.0)

    return tick_ms


def depth2_replay(
    requests: list[Request], streams: int, limits: Limits, costs: RunCosts
) -> tuple[pd.DataFrame, RunCosts, float]:
    """Depth 2's schedule replayed from depth 1's requests, depth 1's pieces to cost it with, and
    how long depth 1 emptied mid-run waiting for an arrival (ms, its replay's).

    With timed arrivals the replay keeps time with those pieces (tick_clock): which requests have
    arrived by each tick depends on how fast the loop runs. Waiting for an arrival is time outside
    the steps: depth 1's is inside its measured overhead, so the overhead changes by what depth 2's
    replay waited less depth 1's replay (the same wait before the first arrival cancels). A wait
    mid-run is not: the measured period of the step before it holds it, so depth 1's pieces are not
    clean; the returned wait says how much."""
    if not any(r.arrival_ms > 0 for r in requests):  # a closed loop: the steps do not need time
        return record(requests, streams, 2, limits).steps, costs, 0.0
    clock = tick_clock(costs)
    depth2 = record(requests, streams, 2, limits, clock)
    depth1 = record(requests, streams, 1, limits, clock)
    overhead = costs.overhead_ms + depth2.idle_ms - depth1.idle_ms
    mid_run = depth1.idle_ms - requests[0].arrival_ms  # the loop starts empty: the first wait
    return depth2.steps, replace(costs, overhead_ms=overhead), mid_run


def same_schedule(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    """Do two schedules take the same steps (kind and rows, in order)?"""
    left, right = a.sort_values("step"), b.sort_values("step")
    return (
        len(left) == len(right)
        and (left["kind"].to_numpy() == right["kind"].to_numpy()).all()
        and (left["batch_size"].to_numpy() == right["batch_size"].to_numpy()).all()
    )


def _window_tokens(schedule: pd.DataFrame) -> float:
    """Tokens a window's periods cover: a row per step but the last (its period runs past it)."""
    return float(schedule["batch_size"].iloc[:-1].sum())


@dataclass(frozen=True)
class WholeRun:
    """One depth-1 / depth-2 pair. Walls in ms; speedups as ratios (1.10 = +10%)."""

    wall_block_ms: float  # depth 1, measured (a window: the sum of its periods)
    wall_pipe_ms: float  # depth 2, measured
    model_ms: float  # depth 2 predicted: the schedule depth 2 ran, costed with its own pieces
    from_d1_ms: float  # depth 2 predicted from depth 1 alone
    replayed: bool  # the depth-2 schedule was replayed from the requests (else depth2_order)
    schedule_match: bool  # ...and is the one depth 2 ran
    terms_pts: dict[str, float] = field(default_factory=dict)  # from_d1 -> model, points per term
    rate_scale: float = 1.0  # window: tokens of depth 2's window over depth 1's (1 for whole runs)
    arrivals: bool = False  # the requests arrived over time (replayed on a clock: depth2_replay)
    waited_ms: float = 0.0  # ...and depth 1 emptied mid-run waiting for one this long (replayed)
    from_d1_carried_ms: float | None = None  # from depth 1 with a hand-over measured elsewhere

    @property
    def observed(self) -> float:
        return self.wall_block_ms / self.wall_pipe_ms * self.rate_scale

    @property
    def predicted(self) -> float:
        return self.wall_block_ms / self.model_ms * self.rate_scale

    @property
    def predicted_d1(self) -> float:
        return self.wall_block_ms / self.from_d1_ms


@dataclass(frozen=True)
class Depth1Forecast:
    """Depth 2 as depth 1 alone foresees it: the schedule it would run and the pieces to cost it."""

    schedule: pd.DataFrame  # depth 2's steps, replayed from the requests (else depth2_order)
    costs: RunCosts  # depth 1's pieces, the replay's waits in its overhead
    replayed: bool
    arrivals: bool  # the requests arrived over time (replayed on a clock: depth2_replay)
    waited_ms: float  # depth 1 emptied mid-run waiting for an arrival this long (replayed)

    def wall_ms(self, whole: bool = True) -> float:
        return pipelined_wall_ms(self.schedule, self.costs, whole)


def forecast_depth1(
    steps1: pd.DataFrame,
    costs1: RunCosts,
    *,
    requests: list[Request] | None,
    streams: int,
    limits: Limits | None,
    window: bool = False,
) -> Depth1Forecast:
    """The forecast from depth 1 alone, from its launched steps and measured pieces: the one
    predict_pair_wall sets beside depth 2 and costmodel.forecast makes where depth 2 never ran."""
    arrivals = requests is not None and any(r.arrival_ms > 0 for r in requests)
    if requests is not None and limits is not None and not window:
        hat, costs1, waited_ms = depth2_replay(requests, streams, limits, costs1)
        return Depth1Forecast(hat, costs1, True, arrivals, waited_ms)
    return Depth1Forecast(depth2_order(steps1), costs1, False, arrivals, 0.0)


def window_steps(steps: pd.DataFrame, window: bool) -> pd.DataFrame:
    """A run's launched steps; a window's only those whose period it holds (the last one's runs
    past it)."""
    steps = launched(steps)
    return steps[steps["period_ms"].notna()] if window else steps


def measured_wall_ms(steps: pd.DataFrame, wall_s: float | None, window: bool) -> float:
    """A run's wall clock (ms); a window's, the sum of its periods."""
    if window:
        return float(steps["period_ms"].iloc[:-1].sum())
    if wall_s is None:
        raise BubblelabError("a whole run's prediction needs both runs' wall clocks")
    return float(wall_s) * 1e3


def predict_pair_wall(
    steps1: pd.DataFrame,
    wall1_s: float | None,
    steps2: pd.DataFrame,
    wall2_s: float | None,
    *,
    requests: list[Request] | None,
    streams: int,
    limits: Limits | None,
    window: bool = False,
    carried_handoff_ms: float | None = None,
    probe_handoff_ms: float | None = None,
) -> WholeRun:
    """Both predictions of depth 2's wall clock for one pair, with the terms between them.

    requests/limits: the depth-1 run's requests in the order sent and the engine's limits; None (a
    trimmed trace) falls back to depth2_order. window: the tables are windows of longer runs.
    carried_handoff_ms: the GPU's idle between two queued steps measured on other runs of the same
    engine and machine (costmodel.carried): the forecast from depth 1 then also with it
    (from_d1_carried_ms), since a depth-1 run has no queued steps to show it.
    probe_handoff_ms: the same idle as the depth-1 run measured it itself before its timed region
    (engine.handoff_probe): the forecast from depth 1 costs it in, and the `handoff` term is then
    what the probe missed.
    """
    steps1, steps2 = window_steps(steps1, window), window_steps(steps2, window)
    measured1 = RunCosts.measure(steps1, wall1_s, 1, window)
    if probe_handoff_ms is not None:
        measured1 = replace(measured1, handoff_ms=probe_handoff_ms)
    c2 = RunCosts.measure(steps2, wall2_s, 2, window)
    foreseen = forecast_depth1(
        steps1, measured1, requests=requests, streams=streams, limits=limits, window=window
    )
    hat, c1 = foreseen.schedule, foreseen.costs
    match = foreseen.replayed and same_schedule(hat, steps2)
    ran = hat if match else steps2  # with its tick structure when the replay reproduced it
    whole = not window
    wall1, wall2 = (
        measured_wall_ms(steps1, wall1_s, window),
        measured_wall_ms(steps2, wall2_s, window),
    )

    def pts(wall_ms: float, schedule: pd.DataFrame) -> float:
        scale = 1.0 if whole else _window_tokens(schedule) / _window_tokens(steps1)
        return (wall1 / wall_ms * scale - 1.0) * 100.0

    # From depth 1 alone to the model, one measured piece at a time.
    steps = {"start": steps1, "admission": hat}
    walls = {
        "start": pipelined_wall_ms(steps1, measured1, whole),
        "admission": pipelined_wall_ms(hat, c1, whole),
        "replay": pipelined_wall_ms(ran, c1, whole),
        "forward": pipelined_wall_ms(ran, replace(c1, gpu=c2.gpu), whole),
        "host": pipelined_wall_ms(
            ran, replace(c1, gpu=c2.gpu, host=c2.host, exposed=c2.exposed), whole
        ),
        "handoff": pipelined_wall_ms(ran, replace(c2, overhead_ms=c1.overhead_ms), whole),
        "overhead": pipelined_wall_ms(ran, c2, whole),
    }
    points = {name: pts(wall, steps.get(name, ran)) for name, wall in walls.items()}
    names = list(points)
    terms = {b: points[b] - points[a] for a, b in zip(names, names[1:], strict=False)}
    return WholeRun(
        wall_block_ms=wall1,
        wall_pipe_ms=wall2,
        model_ms=walls["overhead"],
        from_d1_ms=walls["admission"],
        replayed=foreseen.replayed,
        schedule_match=match,
        terms_pts=terms,
        rate_scale=1.0 if whole else _window_tokens(ran) / _window_tokens(steps1),
        arrivals=foreseen.arrivals,
        waited_ms=foreseen.waited_ms,
        from_d1_carried_ms=None
        if carried_handoff_ms is None
        else pipelined_wall_ms(hat, replace(c1, handoff_ms=carried_handoff_ms), whole),
    )
