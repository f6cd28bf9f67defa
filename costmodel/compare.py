"""Runs side by side: per-run steady-state medians (the post's first table) and depth 1 against
depth 2.

Everything is a steady-state median (core.steady.steady_state), so these tables agree with
the prediction table, the report and `bubblelab analyze`.
"""

from __future__ import annotations

import pandas as pd

from ..core.steady import steady_state
from .configs import CONFIG_KEYS, known_int, run_label
from .model import host_tick_ms, pct, step_gpu_ms

STEP_PARTS = ("forward_ms", "sampling_ms", "kernel_gap_ms", "bubble_ms", "period_ms", "busy_ms")


def step_summary(runs: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Per run: steady-state medians of forward and sampling (spans), the kernel gaps inside them,
    bubble, period and busy time, the host tick (period - wait) and tokens per second over the
    run."""
    rows = []
    for run in runs.to_dict("records"):
        steady = steady_state(steps[steps["run_id"] == run["run_id"]])
        if steady.empty:
            continue
        medians = {
            c: float(steady[c].astype(float).median()) if c in steady else None for c in STEP_PARTS
        }
        rows.append(
            dict(
                run_id=run["run_id"],
                label=run_label(run),
                config=run_label(run, depth=False),
                preset=run.get("preset"),
                device=run["device"],
                streams=known_int(run["streams"]),
                depth=known_int(run["depth"]),
                batch=known_int(steady["batch_size"].iloc[0]),
                steps=len(steady),
                **medians,
                gpu_ms=float(step_gpu_ms(steady).median()),
                host_tick_ms=float(host_tick_ms(steady).median()),
                tokens_per_s=run["generated_tokens"] / run["wall_s"] if run.get("wall_s") else None,
            )
        )
    return pd.DataFrame(rows)


def depth_comparison(runs: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Per configuration measured at both depths: each median at depth 1 and 2 (columns `<name>_d1`,
    `<name>_d2`), the steady-state period ratio and the observed tokens/s ratio, in percent; no
    rows (but its key columns) where none was."""
    none = pd.DataFrame(columns=["config", "period_speedup_pct", "observed_pct"])
    summary = step_summary(runs, steps)
    if summary.empty:
        return none
    keys = [k for k in ("config", *CONFIG_KEYS) if k in summary]
    values = ["batch", *STEP_PARTS, "gpu_ms", "host_tick_ms", "tokens_per_s"]
    # Repeats of a configuration at one depth pool as the mean of their medians.
    wide = summary.groupby([*keys, "depth"], dropna=False)[values].mean().unstack("depth")
    if not {1, 2} <= set(wide.columns.get_level_values("depth")):
        return none
    wide = wide.dropna(subset=[("period_ms", 1), ("period_ms", 2)])
    wide.columns = [f"{name}_d{depth}" for name, depth in wide.columns]
    table = wide.reset_index()
    return table.assign(
        period_speedup_pct=pct(table["period_ms_d1"] / table["period_ms_d2"]),
        observed_pct=pct(table["tokens_per_s_d2"] / table["tokens_per_s_d1"]),
    )
