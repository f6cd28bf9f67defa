"""Across cards: card B's depth-2 speedup forecast from card A's depth-1 run, with the two cards'
measured ratio of forward times and the two hosts' ratio of speed.

The forecast from depth 1 alone (costmodel.wholerun) replays the schedule depth 2 takes from the
requests and costs it with the depth-1 run's pieces. The schedule does not depend on time (the
requests, the stream count and the engine's limits decide it), so on card B the same steps run:
each one's GPU work scaled by `gpu` (B's GPU span of a steady decode step over A's) and each tick's
host work, with the time outside the steps, by `host` (B's host tick, period − wait, over A's).
Depth 1's wall on B follows from A's measured steps the same way: each period's GPU span scaled by
`gpu`, the rest of it (host work the GPU waited for) by `host`.

What it assumes, and where it stops holding:
- one ratio for every step: prefill and decode, every batch size, scale alike (the ratio is read
  at the configuration's steady decode steps; a card whose advantage is bandwidth gains more on
  small decode batches than on long prefills);
- the host's work does not depend on the card (the same engine, driver and CUDA graphs: a newer
  driver or another launch path changes it);
- what depth 1 cannot see on A it cannot see on B: a depth-2 forward or clock tax stays out, as in
  the same-card forecast. The hand-over between queued steps is B's own, as B's depth-1 runs
  probed it (engine.handoff_probe; the median over them, none for runs made before the probe).
The ratios come from depth-1 runs of both cards (DeviceRatio.measured) or from anything else that
measured them (a forward benchmark, a host benchmark: DeviceRatio(gpu, host)).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from ..core.errors import BubblelabError
from ..core.steady import steady_state
from .configs import CONFIG_KEYS, limits_of, pair_runs, run_label
from .costs import Curve, RunCosts, launched, probed_median_ms
from .model import host_tick_ms, step_gpu_ms
from .observed import Observed, median_of_pairs, pair_ratios, pair_repeats, pairs_interval
from .schedule import Limits, requests_from_table
from .wholerun import depth2_replay, pipelined_wall_ms


@dataclass(frozen=True)
class DeviceRatio:
    """Card B over card A: its GPU span of a step, and its host's tick (1.0: the same)."""

    gpu: float
    host: float

    @classmethod
    def measured(cls, steps_a: pd.DataFrame, steps_b: pd.DataFrame) -> DeviceRatio:
        """From the two cards' depth-1 runs of one configuration: the ratio of their steady-state
        medians."""
        a, b = steady_state(steps_a), steady_state(steps_b)
        if a.empty or b.empty:
            raise BubblelabError("no steady-state decode steps to compare the two cards on")
        return cls(
            gpu=float(step_gpu_ms(b).median() / step_gpu_ms(a).median()),
            host=float(host_tick_ms(b).median() / host_tick_ms(a).median()),
        )


def scaled(costs: RunCosts, ratio: DeviceRatio) -> RunCosts:
    """A run's measured step costs as they would be on the other card."""

    def times(curves: dict[str, Curve], k: float) -> dict[str, Curve]:
        return {kind: Curve(c.x, tuple(k * y for y in c.y)) for kind, c in curves.items()}

    return replace(
        costs,
        gpu=times(costs.gpu, ratio.gpu),
        host=times(costs.host, ratio.host),
        exposed=times(costs.exposed, ratio.host),
        overhead_ms=costs.overhead_ms * ratio.host,
    )


def depth1_wall_ms(steps: pd.DataFrame, wall_s: float, ratio: DeviceRatio) -> float:
    """A depth-1 run's wall clock on the other card: each period's GPU span scaled by the GPU
    ratio, the rest of it (host work the GPU waited for) and the time outside the steps by the
    host's, the last step's GPU work by the GPU's. DeviceRatio(1, 1) gives the run's own wall."""
    steps = launched(steps)
    gpu = step_gpu_ms(steps)
    timed = steps["period_ms"].notna()
    periods = steps.loc[timed, "period_ms"]
    inside = float((ratio.gpu * gpu[timed] + ratio.host * (periods - gpu[timed])).sum())
    last_gpu = float(gpu.iloc[-1])
    outside = float(wall_s) * 1e3 - float(periods.sum()) - last_gpu
    return inside + ratio.gpu * last_gpu + ratio.host * outside


def forecast_across(
    steps1: pd.DataFrame,
    wall1_s: float,
    requests: pd.DataFrame,
    streams: int,
    limits: Limits,
    ratio: DeviceRatio,
    handoff_ms: float | None = None,
) -> float:
    """Depth 2 over depth 1 on the other card (ratio; 1.10 = +10%), from one depth-1 run: its
    requests replayed at depth 2, its pieces scaled by the cards' ratios; handoff_ms: the other
    card's hand-over between queued steps (its probe), else none."""
    costs = scaled(RunCosts.measure(steps1, wall1_s, 1), ratio)
    if handoff_ms is not None:
        costs = replace(costs, handoff_ms=handoff_ms)
    schedule, costs, _ = depth2_replay(requests_from_table(requests), streams, limits, costs)
    return depth1_wall_ms(steps1, wall1_s, ratio) / pipelined_wall_ms(schedule, costs)


def predict_across(
    a: tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame],
    b: tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame],
    *,
    n_boot: int = 1000,
    seed: int = 0,
) -> pd.DataFrame:
    """Per configuration measured on both cards (runs, steps, requests of each): card B's depth-2
    speedup forecast from card A's depth-1 runs, beside what B observed. The ratios are measured
    from the two cards' depth-1 runs; the forecast is the median over A's repeats, its interval
    from resampling them."""
    rng = np.random.default_rng(seed)
    keys = [k for k in CONFIG_KEYS if k not in ("device", "model")]
    on_b = {_key(d1, keys): (d1, d2) for d1, d2 in pair_runs(b[0])}
    rows = []
    for d1_a, _ in pair_runs(a[0]):
        if (mine := on_b.get(_key(d1_a, keys))) is None:
            continue
        d1_b, d2_b = mine
        steps_a = a[1][a[1]["run_id"].isin(d1_a["run_id"])]
        ratio = DeviceRatio.measured(steps_a, b[1][b[1]["run_id"].isin(d1_b["run_id"])])
        first = d1_a.iloc[0]
        limits = limits_of(first)
        if limits is None or a[2].empty:
            raise BubblelabError(f"{run_label(first, depth=False)}: no requests to replay")
        handoff = probed_median_ms(d1_b)
        forecasts = np.array(
            [
                forecast_across(
                    a[1][a[1]["run_id"] == run["run_id"]],
                    run["wall_s"],
                    a[2][a[2]["run_id"] == run["run_id"]],
                    int(run["streams"]),
                    limits,
                    ratio,
                    handoff,
                )  # fmt: skip
                for _, run in d1_a.iterrows()
            ]
        )
        observed = _observed(pair_repeats(d1_b, d2_b))
        lo, hi = pairs_interval(_median_pct(forecasts), len(forecasts), n_boot, rng)
        forecast = 100 * (float(np.median(forecasts)) - 1)
        rows.append(
            dict(
                label=run_label(d1_b.iloc[0], depth=False),
                streams=int(first["streams"]),
                from_device=first["device"],
                to_device=d1_b.iloc[0]["device"],
                gpu_ratio=ratio.gpu,
                host_ratio=ratio.host,
                across_predicted_pct=forecast,
                across_predicted_lo=lo,
                across_predicted_hi=hi,
                **observed.columns(),
                across_error_pts=observed.pct - forecast,
            )
        )
    return pd.DataFrame(rows)


def _median_pct(ratios: np.ndarray):
    return lambda idx: 100 * (float(np.median(ratios[idx])) - 1)


def _observed(pairs: list[tuple[pd.Series, pd.Series]]) -> Observed:
    def column(i: int, name: str) -> list[float]:
        return [float(pair[i][name]) for pair in pairs]

    ratios = pair_ratios(*(column(i, c) for i in (0, 1) for c in ("generated_tokens", "wall_s")))
    return median_of_pairs(ratios)


def _key(runs: pd.DataFrame, keys: list[str]) -> tuple:
    first = runs.iloc[0]
    return tuple(None if pd.isna(first.get(k)) else first.get(k) for k in keys)
