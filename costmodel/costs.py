"""What each step of a run cost, measured from its per-step table, as curves the whole-run model
reads.

A run's steps are tabulated by kind and batch size: the GPU work a step's own launch does not pace,
and the host work of the tick that launched it. Means, not medians: the whole-run model sums them
over a schedule, so what matters is each size's total. Plus two run-level pieces: the GPU hand-over
between two queued steps (depth 2's leftover bubble) and the time outside the steps (start-up, the
wait after the last step). Everything is read off the run itself; nothing is fitted to a speedup.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..core.errors import BubblelabError
from ..core.steady import steady_state
from .model import step_gpu_ms

KINDS = ("decode", "prefill")


@dataclass(frozen=True)
class Curve:
    """y(x) through measured points (the mean y at each x): linear between them, and beyond them the
    end
    segment's slope, never falling (a bigger step does not cost less)."""

    x: tuple[float, ...]
    y: tuple[float, ...]

    @classmethod
    def mean_by(cls, x, y) -> Curve:
        means = pd.Series(np.asarray(y, dtype=float)).groupby(np.asarray(x, dtype=float)).mean()
        if means.empty:
            raise BubblelabError("no steps to build a cost curve from")
        return cls(tuple(means.index), tuple(means.to_numpy()))

    def __call__(self, x):
        x = np.asarray(x, dtype=float)
        xs, ys = np.asarray(self.x), np.asarray(self.y)
        out = np.interp(x, xs, ys)
        if len(xs) > 1:
            lo = max(0.0, (ys[1] - ys[0]) / (xs[1] - xs[0]))
            hi = max(0.0, (ys[-1] - ys[-2]) / (xs[-1] - xs[-2]))
            out = np.where(x < xs[0], ys[0] - lo * (xs[0] - x), out)
            out = np.where(x > xs[-1], ys[-1] + hi * (x - xs[-1]), out)
        return np.maximum(out, 0.0)


def launched(steps: pd.DataFrame) -> pd.DataFrame:
    """The steps that ran, in order: a tick that planned nothing (the last one at depth 2) leaves a
    row
    with only its plan time and no kind."""
    return steps[steps["kind"].notna()].sort_values("step")


def _col(steps: pd.DataFrame, name: str) -> pd.Series:
    return steps[name].fillna(0.0) if name in steps else pd.Series(0.0, index=steps.index)


def own_gpu_ms(steps: pd.DataFrame) -> pd.Series:
    """GPU time of each step that its own launch does not pace.

    A graph replay is issued whole; its first kernels merely start before cudaGraphLaunch returns,
    and all of its span is GPU work. An eager step (a prefill issued kernel by kernel from Python)
    runs as fast as its launch issues it: the part of its span the host spent neither finalizing nor
    waiting ran under the launch, it is host time (inside the tick's host work already) and depth 2
    cannot run it sooner. So a prefill counts as paced when most of its span ran under its launch,
    and its own GPU time is the rest. Decode steps are graph replays (or, eager on the CPU, not
    paced by a GPU): never paced.
    """
    gpu = step_gpu_ms(steps)
    under_launch = (gpu - _col(steps, "finalize_ms") - _col(steps, "wait_ms")).clip(lower=0)
    under_launch = under_launch.clip(upper=_col(steps, "launch_ms"))
    paced = (steps["kind"] == "prefill") & (under_launch > gpu / 2)
    return gpu.where(~paced, gpu - under_launch)


def tick_host_ms(steps: pd.DataFrame, depth: int) -> pd.Series:
    """Host work of the tick that launched each step: its plan, launch and finalize, the commit
    (less its wait) that shares the tick, and the run's mean of the loop code no phase names.

    The tick that launches step t commits step t at depth 1 and step t − 1 at depth 2. The unnamed
    part is what the host thread did besides named phases and waiting: over a run the thread goes
    round once per period, so it is (Σ period − Σ wait − Σ named) / steps, at either depth.
    """
    steps = steps.sort_values("step")
    launch = _col(steps, "plan_ms") + _col(steps, "launch_ms") + _col(steps, "finalize_ms")
    commit = (_col(steps, "commit_ms") - _col(steps, "wait_ms")).clip(lower=0)
    if depth == 2:
        commit = commit.shift(1, fill_value=0.0)
    timed = steps["period_ms"].notna()
    named = launch + (_col(steps, "commit_ms") - _col(steps, "wait_ms")).clip(lower=0)
    unnamed = (steps["period_ms"] - _col(steps, "wait_ms") - named)[timed]
    loop = max(0.0, float(unnamed.mean())) if timed.any() else 0.0
    return launch + commit + loop


def tail_ms(steps: pd.DataFrame) -> float:
    """The last step has no period: it lasts its GPU work and a tick of host work in series."""
    last = steps.sort_values("step").iloc[[-1]]
    return float(step_gpu_ms(last).iloc[0] + tick_host_ms(last, 1).iloc[0])


def handoff_ms(steps: pd.DataFrame) -> float:
    """The GPU's own idle between two steps queued back to back: the median bubble of the steady
    steps the host was still waiting on when they ended (wait > bubble: the next step was queued
    already, so the idle
    was not the host's). 0 when there are none (a host-bound run)."""
    steady = steady_state(steps)
    queued = steady[steady["wait_ms"] > steady["bubble_ms"]]
    return float(queued["bubble_ms"].median()) if len(queued) else 0.0


def own_handoff_ms(d2: pd.DataFrame, steps: pd.DataFrame) -> float:
    """A configuration's hand-over: the median over its depth-2 runs of each one's queued idle."""
    each = [handoff_ms(launched(steps[steps["run_id"] == r])) for r in d2["run_id"]]
    return float(np.median(each))


def probed_handoff_ms(run) -> float | None:
    """The hand-over a run probed before its timed region (engine.handoff_probe), ms; None where
    it recorded none (runs made before the probe)."""
    try:
        value = float(run.get("handoff_probe_ms"))
    except (TypeError, ValueError):
        return None
    return value if np.isfinite(value) else None


def probed_median_ms(runs: pd.DataFrame) -> float | None:
    """The median of the runs' probed hand-overs, ms; None where none of them probed it."""
    values = [v for _, run in runs.iterrows() if (v := probed_handoff_ms(run)) is not None]
    return float(np.median(values)) if values else None


def handoff_columns(d1: pd.DataFrame, d2: pd.DataFrame, steps: pd.DataFrame) -> dict:
    """A configuration's hand-over, ms, three ways: as its depth-1 runs probed it (the forecast's),
    as its depth-2 runs probed it, and as depth 2's steps measured it (handoff_ms); each the median
    over runs (NaN where none probed it)."""
    probed = [probed_median_ms(d) for d in (d1, d2)]
    return dict(
        handoff_probe_ms=float("nan") if probed[0] is None else probed[0],
        handoff_probe_d2_ms=float("nan") if probed[1] is None else probed[1],
        handoff_d2_ms=own_handoff_ms(d2, steps),
    )


@dataclass(frozen=True)
class RunCosts:
    """One run's measured step costs (ms), by kind and batch size."""

    gpu: dict[str, Curve]  # own GPU time of a step (own_gpu_ms)
    host: dict[str, Curve]  # host work of the tick that launches it (tick_host_ms)
    exposed: dict[
        str, Curve
    ]  # the same less its finalize, which runs once its GPU work has started
    handoff_ms: (
        float  # GPU idle between two steps queued back to back (depth 2's bubble); 0 at depth 1
    )
    overhead_ms: float  # wall clock outside the steps: before the first tick, after the last step

    @classmethod
    def measure(
        cls, steps: pd.DataFrame, wall_s: float | None, depth: int, window: bool = False
    ) -> RunCosts:
        """From one run's per-step table. window: the table is part of a longer run, so the run's
        wall clock
        says nothing about it and there is no time outside its steps."""
        steps = launched(steps)
        own, host = own_gpu_ms(steps), tick_host_ms(steps, depth)
        exposed = host - _col(steps, "finalize_ms")
        gpu, hosts, exposes = {}, {}, {}
        for kind in KINDS:
            mine = steps["kind"] == kind
            if mine.any():
                rows = steps.loc[mine, "batch_size"]
                gpu[kind] = Curve.mean_by(rows, own[mine])
                hosts[kind] = Curve.mean_by(rows, host[mine])
                exposes[kind] = Curve.mean_by(rows, exposed[mine])
        if "decode" not in gpu:
            raise BubblelabError("no decode steps to measure step costs from")
        for part in (
            gpu,
            hosts,
            exposes,
        ):  # a run without prefills (a window) costs them like decodes
            part.setdefault("prefill", part["decode"])
        handoff = handoff_ms(steps) if depth == 2 else 0.0
        # Outside the steps: the wall less the periods, the last step and the host time before the
        # first step's GPU work began (its tick, less what of it already ran its kernels: a paced
        # launch).
        paced = float(step_gpu_ms(steps).iloc[0] - own.iloc[0])
        inside = float(steps["period_ms"].sum()) + tail_ms(steps) + float(host.iloc[0]) - paced
        overhead = 0.0 if window or wall_s is None else max(0.0, float(wall_s) * 1e3 - inside)
        return cls(gpu, hosts, exposes, max(0.0, handoff), overhead)

    def step_gpu(self, kinds, sizes) -> np.ndarray:
        return _by_kind(self.gpu, kinds, sizes)

    def step_host(self, kinds, sizes) -> np.ndarray:
        return _by_kind(self.host, kinds, sizes)

    def step_exposed(self, kinds, sizes) -> np.ndarray:
        return _by_kind(self.exposed, kinds, sizes)


def _by_kind(curves: dict[str, Curve], kinds, sizes) -> np.ndarray:
    kinds, sizes = np.asarray(kinds), np.asarray(sizes, dtype=float)
    out = np.zeros(len(kinds))
    for kind, curve in curves.items():
        mine = kinds == kind
        out[mine] = curve(sizes[mine])
    return out
