"""What the profiler did to each phase: the same configuration unprofiled and under nsys, side by
side.

run-and-profile measures every configuration without a profiler (the runs the cost model is fed) and
the first repeats again under nsys. Per configuration and depth this table puts their steady-state
medians (core.steady.steady_state, pooled over the runs) side by side, with the relative
change nsys made, and the observed speedup each way: profiler overhead is host overhead, which is
what pipelining hides, so a profiled speedup overstates the engine's.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..core.steady import steady_state
from .configs import CONFIG_KEYS, run_label
from .model import host_tick_ms, pct, step_gpu_ms

PHASES = ("forward_ms", "sampling_ms", "bubble_ms", "period_ms", "plan_ms", "launch_ms",
          "finalize_ms", "commit_ms", "wait_ms")  # fmt: skip


def steady_medians(steps: pd.DataFrame) -> dict[str, float]:
    """Steady-state medians of the steps' phases (ms), pooled over their runs."""
    steady = steady_state(steps)
    out = {c: float(steady[c].median()) for c in PHASES if c in steady}
    out["gpu_ms"] = float(step_gpu_ms(steady).median())
    out["host_tick_ms"] = float(host_tick_ms(steady).median())
    return out


def _rate(runs: pd.DataFrame) -> float:
    return float(runs["generated_tokens"].sum() / runs["wall_s"].sum())


def profiler_perturbation(runs: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Per configuration and depth measured both ways: `<phase>_plain`, `<phase>_nsys` (steady-state
    medians, ms) and `<phase>_inflation` (nsys / plain − 1), tokens/s each way, and per
    configuration
    the speedup depth 2 over depth 1 each way (speedup_plain_pct, speedup_nsys_pct)."""
    if "profiled" not in runs or not runs["profiled"].any() or runs["profiled"].all():
        return pd.DataFrame()
    keys = [k for k in CONFIG_KEYS if k in runs and k != "profiled"]
    rows = []
    for _, config in runs.groupby(keys, dropna=False, sort=True):
        rates = {}
        for depth, both in config.groupby("depth"):
            plain, nsys = both[~both["profiled"].astype(bool)], both[both["profiled"].astype(bool)]
            if plain.empty or nsys.empty:
                continue
            a = steady_medians(steps[steps["run_id"].isin(plain["run_id"])])
            b = steady_medians(steps[steps["run_id"].isin(nsys["run_id"])])
            rates[depth] = (_rate(plain), _rate(nsys))
            row = dict(label=run_label(plain.iloc[0], depth=False), depth=int(depth),
                       streams=int(plain["streams"].iloc[0]), runs_plain=len(plain),
                       runs_nsys=len(nsys), tokens_per_s_plain=rates[depth][0],
                       tokens_per_s_nsys=rates[depth][1])  # fmt: skip
            for name in a:
                row[f"{name.removesuffix('_ms')}_plain"] = a[name]
                row[f"{name.removesuffix('_ms')}_nsys"] = b[name]
                row[f"{name.removesuffix('_ms')}_inflation"] = (
                    b[name] / a[name] - 1.0 if a[name] else np.nan
                )
            rows.append(row)
        if {1, 2} <= set(rates):
            for row in rows[-2:]:
                row["speedup_plain_pct"] = pct(rates[2][0] / rates[1][0])
                row["speedup_nsys_pct"] = pct(rates[2][1] / rates[1][1])
    return pd.DataFrame(rows)
