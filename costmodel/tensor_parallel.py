"""The cost model under tensor parallelism: what pipelining buys at TP = N, from every rank's
measured pieces.

At TP N a step runs on N GPUs joined by collectives, so no rank's forward ends before the slowest
rank reaches the last collective; rank 0 alone runs the loop's host work (plan, launch, finalize,
commit), and hands each step to the workers inside launch and finalize (its `handoff` range). The
single-GPU models (model.py per step, wholerun.py per run) therefore apply to rank 0's per-step
table with one piece changed, the step's GPU time, taken across the ranks:

    forward_t  = max_r forward_end_r(t) - max_r forward_start_r(t)
    sampling_t = max_r sampling_ms_r(t)

- The straggler: a step lasts until its slowest rank has finished it (its end, across ranks).
- The hand-off: a worker begins step t only once rank 0's message has reached it. At depth 1 rank
  0's forward span holds that lag (its first collective waits for the worker); depth 2 hands step
  t+1 over while the GPUs still run step t, so the lag hides behind them. Beginning the forward at
  the last rank's start takes the lag out of the GPU piece. Rank 0's host time handing over (the
  `handoff` range) stays in its host tick, which depth 2 still pays once a step.

Everything else is the single-GPU model's: rank 0's periods and wall clocks, depth 1 and 2 paired
by repeat, intervals over pairs (observed.py), nothing fitted to an observed speedup. A worker's
own host work (its launch and finalize) is assumed to keep up with rank 0's tick; tp_pieces reports
it beside rank 0's, with the straggler's extra and the hand-off's lag and host time, so a run where
it does not shows itself.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..core.steady import steady_steps

PIECES = (
    "rank0_gpu_ms",  # rank 0's forward + sampling spans
    "tp_gpu_ms",  # the GPU piece across ranks (forward_t + sampling_t above)
    "straggler_extra_ms",  # how much later the last rank's GPU finished the step than rank 0's
    "handoff_lag_ms",  # how much later the last rank's GPU began the forward than rank 0's
    "handoff_host_ms",  # rank 0's host time handing the step over (its `handoff` ranges)
    "rank0_host_ms",  # rank 0's launch + finalize (the worker's counterpart below)
    "worker_host_ms",  # the slowest worker's launch + finalize
)


def tp_steps(steps: pd.DataFrame, ranks: pd.DataFrame | None) -> pd.DataFrame:
    """Rank 0's per-step table with forward_ms and sampling_ms taken across the ranks (above), for
    the runs `ranks` (results.json's table, profiling/sql/tp_rank_steps.sql) covers; rank 0's own
    values are kept as rank0_forward_ms and rank0_sampling_ms. Other runs are returned as given."""
    if ranks is None or ranks.empty:
        return steps
    across = _across(ranks)
    out = steps.merge(across, on=["run_id", "step"], how="left")
    has = out["tp_forward_ms"].notna()
    out["rank0_forward_ms"], out["rank0_sampling_ms"] = out["forward_ms"], out["sampling_ms"]
    out.loc[has, "forward_ms"] = out.loc[has, "tp_forward_ms"]
    out.loc[has, "sampling_ms"] = out.loc[has, "tp_sampling_ms"]
    return out.drop(columns=[c for c in across if c not in ("run_id", "step")])


def _across(ranks: pd.DataFrame) -> pd.DataFrame:
    """Per run and step: the GPU piece across ranks and what it is made of (ms)."""
    key = ["run_id", "step"]
    ends = ranks.assign(
        gpu_end=ranks[["forward_end", "sampling_end"]].max(axis=1),
        host_ms=ranks["launch_ms"].fillna(0) + ranks["finalize_ms"].fillna(0),
    )
    lead = ends[ends["rank"] == 0].set_index(key)
    workers = ends[ends["rank"] > 0].groupby(key)
    grouped = ends.groupby(key)
    across = pd.DataFrame(
        {
            "tp_forward_ms": (grouped["forward_end"].max() - grouped["forward_start"].max()) / 1e6,
            "tp_sampling_ms": grouped["sampling_ms"].max(),
            "straggler_extra_ms": (grouped["gpu_end"].max() - lead["gpu_end"]) / 1e6,
            "handoff_lag_ms": (grouped["forward_start"].max() - lead["forward_start"]) / 1e6,
            "handoff_host_ms": lead["handoff_ms"],
            "rank0_host_ms": lead["host_ms"],
            "worker_host_ms": workers["host_ms"].max(),
        }
    )
    return across.reset_index()


def tp_pieces(ranks: pd.DataFrame) -> pd.DataFrame:
    """Per tensor-parallel run (rank 0's run_id): its ranks and the PIECES, medians over rank 0's
    steady steps."""
    if ranks.empty:
        return pd.DataFrame(columns=["run_id", "ranks", *PIECES])
    steady = steady_steps(ranks)
    across = _across(steady).assign(tp_gpu_ms=lambda t: t["tp_forward_ms"] + t["tp_sampling_ms"])
    lead = steady[steady["rank"] == 0]
    own = lead.assign(rank0_gpu_ms=lead["forward_ms"] + lead["sampling_ms"])[
        ["run_id", "step", "rank0_gpu_ms"]
    ]
    across = across.merge(own, on=["run_id", "step"])
    pieces = across.groupby("run_id")[list(PIECES)].median()
    pieces.insert(0, "ranks", steady.groupby("run_id")["rank"].nunique())
    return pieces.reset_index()


def tp_columns(d1: pd.DataFrame, d2: pd.DataFrame, ranks: pd.DataFrame | None) -> dict:
    """The prediction table's tensor-parallel columns for a configuration's runs: tensor_parallel,
    gpu_from (whose GPU pieces the model used), and the PIECES of its depth-1 runs (what the
    prediction from depth 1 is built from; handoff_lag_ms is what depth 2 is expected to hide)
    beside depth 2's straggler extra."""
    tp = pd.to_numeric(d1.get("tensor_parallel", pd.Series([1])), errors="coerce").max()
    tp = 1 if pd.isna(tp) else int(tp)
    out: dict = {"tensor_parallel": tp}
    if tp == 1:
        return out | {"gpu_from": "one GPU"}
    ids = {*d1["run_id"], *d2["run_id"]}
    mine = ranks[ranks["run_id"].isin(ids)] if ranks is not None and len(ranks) else None
    if mine is None or mine.empty:
        return out | {"gpu_from": "rank 0 (no per-rank tables: each step's GPU time is rank 0's)"}
    pieces = tp_pieces(mine).set_index("run_id")
    one = pieces.loc[pieces.index.isin(d1["run_id"])]
    two = pieces.loc[pieces.index.isin(d2["run_id"])]
    out["gpu_from"] = (
        f"each step's slowest of {int(pieces['ranks'].max())} ranks (straggler's end, last "
        "rank's start); host ticks of rank 0"
    )
    out |= {f"{p}": _mean(one[p]) for p in PIECES}
    out["straggler_extra_d2_ms"] = _mean(two["straggler_extra_ms"])
    out["handoff_lag_d2_ms"] = _mean(two["handoff_lag_ms"])
    return out


def tp_comparison(table: pd.DataFrame) -> pd.DataFrame:
    """What pipelining buys at each TP: the prediction table's rows of every (model, device,
    streams) measured at more than one tensor-parallel size, side by side (one row per size)."""
    if table.empty or "tensor_parallel" not in table:
        return pd.DataFrame()
    keys = ["model", "device", "streams"]
    sizes = table.groupby(keys, dropna=False)["tensor_parallel"].transform("nunique")
    columns = [
        *keys, "tensor_parallel", "observed_pct", "observed_lo", "observed_hi", "predicted_pct",
        "wall_predicted_pct", "wall_d1_predicted_pct", "blocking_ms", "pipelined_ms", "gpu_from",
    ]  # fmt: skip
    both = table[sizes > 1]
    return both[[c for c in columns if c in both]].sort_values([*keys, "tensor_parallel"])


def _mean(values: pd.Series) -> float | None:
    v = pd.to_numeric(values, errors="coerce").dropna()
    return float(np.mean(v)) if len(v) else None
