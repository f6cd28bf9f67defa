"""The forecast from depth-1 runs alone, where no depth-2 run was measured to set it beside.

predict_runs leads each configuration measured at both depths with this forecast
(wall_d1_predicted_pct) beside the observed speedup. A user who has run only the blocking loop gets
the same forecast here, under the same column names: each depth-1 run's depth-2 schedule replayed
from its requests and costed with its own measured pieces (costmodel.wholerun.forecast_depth1), and
over repeats their median, its interval resampling the repeats. Nothing has checked it yet: only a
depth-2 run can (predict_runs' wall_d1_error_pts).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from ..core.errors import BubblelabError
from .configs import CONFIG_KEYS, is_window, known_int, limits_of, run_label, runs_modelled
from .costs import RunCosts, probed_handoff_ms
from .model import pct
from .observed import median_known, pairs_interval, wall_cv_pct
from .power import with_power
from .predict import arrival_columns
from .schedule import requests_from_table
from .tensor_parallel import tp_steps
from .wholerun import Depth1Forecast, forecast_depth1, measured_wall_ms, window_steps

# What a forecast-only table shows first: predict's HEADLINE less what needs a depth-2 run.
FORECAST = (
    "label", "wall_d1_predicted_pct", "wall_d1_predicted_lo", "wall_d1_predicted_hi",
    "wall_d1_predicted_known", "repeats",
    "wall_cv_d1_pct", "tokens_per_s_d1", "tokens_per_s_forecast",
)  # fmt: skip


def one_depth(runs: pd.DataFrame) -> int | None:
    """The depth every run ran at, when they all ran at one (then no configuration pairs up)."""
    depths = {known_int(d) for d in runs["depth"]} - {None}
    return depths.pop() if len(depths) == 1 else None


@dataclass(frozen=True)
class RunForecast:
    """One depth-1 run: its measured wall and depth 2's as it foresees it (ms; a trimmed trace's
    walls are the sums of its periods)."""

    wall_block_ms: float
    wall_pipe_ms: float
    whole: bool  # the run, not a window of it
    foreseen: Depth1Forecast


def forecast_run(run: pd.Series, steps: pd.DataFrame, requests: pd.DataFrame) -> RunForecast:
    """What one depth-1 run foresees of depth 2."""
    mine = steps[steps["run_id"] == run["run_id"]]
    window = is_window(mine, run)
    launched = window_steps(mine, window)
    costs = RunCosts.measure(launched, run.get("wall_s"), 1, window)
    if (probe := probed_handoff_ms(run)) is not None:
        costs = replace(costs, handoff_ms=probe)
    sent = requests[requests["run_id"] == run["run_id"]] if len(requests) else requests
    foreseen = forecast_depth1(
        launched,
        costs,
        requests=requests_from_table(sent) if len(sent) else None,
        streams=known_int(run.get("streams")) or 0,  # a trace may not know it: no replay then
        limits=limits_of(run),
        window=window,
    )
    wall1 = measured_wall_ms(launched, run.get("wall_s"), window)
    return RunForecast(wall1, foreseen.wall_ms(not window), not window, foreseen)


def forecast_config(
    d1: pd.DataFrame,
    steps: pd.DataFrame,
    requests: pd.DataFrame,
    n_boot: int,
    seed: int,
    power_limit_w: float | None = None,
) -> dict:
    """One row of the forecast table: a configuration's depth-1 repeats, each a forecast of its
    own; the median and its interval over them. power_limit_w: the GPU's (costmodel.power)."""
    runs = [r for _, r in d1.iterrows()]
    each = [forecast_run(r, steps, requests) for r in runs]
    wall1 = np.array([f.wall_block_ms for f in each])
    wall2 = np.array([f.wall_pipe_ms for f in each])
    ratios = wall1 / wall2  # the same tokens at both depths

    def over(idx: np.ndarray) -> float:
        return pct(float(np.median(ratios[idx])))

    lo, hi = pairs_interval(over, len(runs), n_boot, np.random.default_rng(seed))
    tokens = np.array([float(r["generated_tokens"]) for r in runs])
    # depth 1's median rate, and it times the forecast (not depth 2's median rate: a median of
    # ratios is not a ratio of medians, and the two columns must say the same speedup); a
    # window's tokens are not its run's
    rate = float(np.median(tokens / wall1 * 1e3)) if all(f.whole for f in each) else np.nan
    forecast = over(np.arange(len(runs)))

    first = d1.iloc[0]
    return dict(
        label=run_label(first, depth=False),
        wall_d1_predicted_pct=forecast,
        wall_d1_predicted_lo=lo,
        wall_d1_predicted_hi=hi,
        wall_d1_predicted_known=median_known(lo, hi, len(runs)),
        repeats=len(runs),
        wall_cv_d1_pct=wall_cv_pct(tokens, pd.to_numeric(d1["wall_s"], errors="coerce")),
        tokens_per_s_d1=rate,
        tokens_per_s_forecast=rate * (1 + forecast / 100),
        model=first.get("model"),
        device=first["device"],
        preset=first.get("preset"),
        streams=known_int(first.get("streams")),
        wall_block_ms=float(np.median(wall1)),
        wall_pipe_forecast_ms=float(np.median(wall2)),
        replayed=all(f.foreseen.replayed for f in each),
        handoff_probe_ms=_median_probe(runs),
        **with_power(arrival_columns([f.foreseen for f in each]), d1, steps, power_limit_w),
        runs_block=",".join(str(r["run_id"]) for r in runs),
    )


def _median_probe(runs: list[pd.Series]) -> float:
    probes = [p for r in runs if (p := probed_handoff_ms(r)) is not None]
    return float(np.median(probes)) if probes else np.nan


def unchecked_forecast(
    runs: pd.DataFrame,
    steps: pd.DataFrame,
    requests: pd.DataFrame | None = None,
    ranks: pd.DataFrame | None = None,
    n_boot: int = 1000,
    power_limit_w: float | None = None,
) -> pd.DataFrame:
    """forecast_runs where every run is at depth 1 (nothing to check it against: what predict,
    the sweep and the page then show); with runs at another depth, an empty table."""
    if one_depth(runs) != 1:
        return pd.DataFrame(columns=list(FORECAST))
    return forecast_runs(runs, steps, requests, ranks, n_boot, power_limit_w=power_limit_w)


def forecast_runs(
    runs: pd.DataFrame,
    steps: pd.DataFrame,
    requests: pd.DataFrame | None = None,
    ranks: pd.DataFrame | None = None,
    n_boot: int = 1000,
    seed: int = 0,
    power_limit_w: float | None = None,
) -> pd.DataFrame:
    """The forecast table for every configuration with depth-1 runs (FORECAST first), whether or
    not depth 2 ran too. A configuration that cannot be forecast is left out and named, with the
    reason, in table.attrs["skipped"], as in predict_runs. power_limit_w: the GPU's, for the
    caveat of costmodel.power."""
    rows, skipped = [], []
    steps = tp_steps(steps, ranks)
    requests = requests if requests is not None else pd.DataFrame()
    modelled = runs_modelled(runs)
    keys = [k for k in CONFIG_KEYS if k in modelled]
    for _, group in modelled.groupby(keys, dropna=False, sort=True):
        d1 = group[group["depth"] == 1]
        if d1.empty:
            continue
        try:
            row = forecast_config(d1, steps, requests, n_boot, seed, power_limit_w)
        except BubblelabError as e:
            skipped.append(f"{run_label(d1.iloc[0], depth=False)}: {e}")
            continue
        rows.append({**{k: row[k] for k in FORECAST}, **row})
    table = pd.DataFrame(rows) if rows else pd.DataFrame(columns=list(FORECAST))
    table.attrs["skipped"] = skipped
    return table
