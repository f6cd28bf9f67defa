"""Will pipelining run the GPU into its power limit? At depth 1 the GPU idles through each step's
bubble; pipelined, it works through it and draws more power, and a GPU held at its limit lowers its
clock, which stretches the GPU work depth 1 timed. Depth 1 alone cannot time the slower clock, but
it shows the risk: the power it drew is about idle + busy share x (kept busy - idle), so with the
GPU's idle draw known (IDLE_W) it gives the draw kept busy (kept_busy_w), and the caveat is said
where that reaches the limit.

The rule was set on qwen3-8b at 128 streams on an H200 (700 W): 683 W at depth 1, busy 89%; at
depth 2 its median SM clock fell 1965 -> 1808 MHz and the forecast from depth 1 alone was 1.7 points
high. Held out on five configurations chosen before they ran (benchmarks/power_check.json) it fired
on all five, once early: drawn / busy counts the idling GPU's draw as work. The idle draw, measured
apart from any engine (benchmarks.idle_power: 104-119 W at 1980 MHz over three kernels and two
cycle lengths, 113 W taken), is now taken out; held out again on six more near the limit
(benchmarks/power_check_2.json) it was right on all six (the old projection: four of six), and over
all 37 H200 configurations with power samples it fires exactly where depth 2's median SM clock fell
2% or more (docs/h200-costmodel.md). How much the GPU's work grows as its clock falls depends on how
memory-bound it is (a run's GPU work grew 1.3-6.1% for clock falls of 7-16%, not in step with the
clock), which depth 1 does not show, so the forecast is flagged, not scaled. A GPU with no IDLE_W
entry keeps drawn / busy, which fires early, and the caveat says so."""

from __future__ import annotations

import numpy as np
import pandas as pd

# What a GPU draws idling between kernels at its working clock, W (benchmarks.idle_power: the
# intercept of its power against the busy share of kernels run in a cycle).
IDLE_W: dict[str, float] = {"NVIDIA H200": 113.0}

# What the flagged rows did on the H200, said with the caveat.
SEEN = (
    "on an H200, 2-5% over: the clock fell 2-3% and the forecast ran 0.6-0.8 points high; 7-13% "
    "over: it fell 7-16% and the forecast ran 1.7-6.5 points high"
)


def power_limit_w(provenance: dict | None) -> float | None:
    """The lowest power limit of the GPUs a run directory's machine lists (results.provenance's
    machine.gpus, from nvidia-smi); None where it lists none."""
    machine = (provenance or {}).get("machine") if isinstance(provenance, dict) else None
    gpus = machine.get("gpus") if isinstance(machine, dict) else None
    limits = [
        float(g["power_limit_w"])
        for g in gpus or []
        if isinstance(g, dict) and g.get("power_limit_w")
    ]
    return min(limits) if limits else None


def full_duty_power_w(d1: pd.DataFrame, steps: pd.DataFrame) -> tuple[float, float] | None:
    """(median power the depth-1 runs drew, W; the GPU's busy share of their steps' time): None
    without power samples or busy times."""
    power = pd.to_numeric(d1.get("power_w", pd.Series(dtype=float)), errors="coerce").dropna()
    timed = steps[steps["run_id"].isin(d1["run_id"])]
    if power.empty or "busy_ms" not in timed:
        return None
    timed = timed[["busy_ms", "period_ms"]].apply(pd.to_numeric, errors="coerce").dropna()
    period = float(timed["period_ms"].sum())
    if period <= 0:
        return None
    return float(np.median(power)), float(timed["busy_ms"].sum()) / period


def fit_idle(busy: list[float], watts: list[float]) -> dict:
    """Least squares watts = idle + busy x (kept_busy - idle) over kernels run at several duties
    (benchmarks.idle_power): the idle draw (intercept), the kept-busy draw (the line at busy = 1)
    and the largest residual, W."""
    b, w = np.asarray(busy, float), np.asarray(watts, float)
    if len(b) < 3 or np.ptp(b) < 0.2:
        raise ValueError("fitting an idle draw needs 3 or more duties spanning 0.2 or more")
    slope, idle = np.polyfit(b, w, 1)
    resid = w - (idle + slope * b)
    return {"idle_w": float(idle), "kept_busy_w": float(idle + slope),
            "max_residual_w": float(np.abs(resid).max())}  # fmt: skip


def idle_power_w(d1: pd.DataFrame) -> float | None:
    """What the depth-1 runs' GPU draws idling between kernels at its working clock (IDLE_W, by the
    runs' `device`); None for a GPU not measured."""
    names = set(d1.get("device", pd.Series(dtype=object)).dropna())
    return IDLE_W.get(names.pop()) if len(names) == 1 else None


def kept_busy_w(drawn_w: float, busy: float, idle_w: float | None) -> float:
    """The draw of the GPU kept busy at depth 1's clock: drawn = idle + busy x (kept busy - idle),
    solved; with no idle draw known, drawn / busy (which counts idling as work: high)."""
    return (drawn_w - (1 - busy) * (idle_w or 0.0)) / busy


def with_power(columns: dict, d1: pd.DataFrame, steps: pd.DataFrame, limit_w: float | None) -> dict:
    """columns (arrival_columns') with `power_full_duty_w` (the depth-1 GPU's draw kept busy,
    kept_busy_w; NaN where unknown), and a caveat added to `wall_d1_caveat` where that reaches
    the limit."""
    found = full_duty_power_w(d1, steps)
    idle = idle_power_w(d1)
    full = kept_busy_w(*found, idle) if found and found[1] > 0 else np.nan
    out = dict(columns, power_full_duty_w=full)
    if limit_w and found and full >= limit_w:
        idling = (
            f"its ~{idle:.0f} W idle draw taken out" if idle is not None
            else "no idle draw measured for this GPU: idling counts as work, so this may fire early"
        )  # fmt: skip
        said = (
            f"power: depth 1 drew {found[0]:.0f} W with the GPU busy {found[1]:.0%} of its steps, "
            f"~{full:.0f} W kept busy ({idling}), over its {limit_w:.0f} W limit by "
            f"{full / limit_w - 1:.0%}; pipelined, the GPU will likely lower its clock and stretch "
            f"the GPU work depth 1 timed, so the forecast is likely high ({SEEN})"
        )
        out["wall_d1_caveat"] = "; ".join(filter(None, [columns.get("wall_d1_caveat"), said]))
    return out
