"""The steady state of a run: the steps every answer and every prediction is a median over.

One rule for the whole project: profiling's answers, the cost model, the report and `bubblelab
analyze` all cover these steps. A step of a per-step table (core.contract, one or more runs) is
steady when
  1. it is a decode step whose next step is a decode step too (its period is decode to decode),
  2. its batch size is the run's modal decode batch size (ties: the larger), which drops the ramp-up
     while requests are admitted and the end-of-run ramp-down as they finish (a foreign run's batch
     size is unknown, NaN, and rule 2 keeps all its decode steps),
  3. for a run of unknown batch size (foreign), its GPU busy time is at least 1/PREFILL_RATIO of the
     run's median decode step's: rule 2's stand-in, which drops steps that hold next to no GPU work,
     such as the host-side checks transformers' `generate` reads back before its first forward
     (4-18 us of kernels against 4 ms a decode step),
  4. and it is not among the first `warmup` steps that pass 1 to 3 (allocator, caches, clocks
     settle).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

WARMUP_STEPS = 5  # rule 4: steady candidates skipped at the start of a run
# A step with this many times the median step's GPU time is prefill-like (profiling.steps names a
# foreign trace's step kinds by it); rule 3 keeps a step with at least 1/this of the median's.
PREFILL_RATIO = 2.0


def steady_state(steps: pd.DataFrame, warmup: int = WARMUP_STEPS) -> pd.DataFrame:
    """The steady rows of a per-step table, ordered by run_id and step. A table without busy_ms (a
    rank's steps) skips rule 3."""
    ordered = steps.sort_values(["run_id", "step"], kind="stable").reset_index(drop=True)
    run = ordered["run_id"]
    decode = ordered["kind"].eq("decode")
    sizes, busy = ordered["batch_size"], ordered.get("busy_ms", pd.Series(np.nan, ordered.index))
    modal = run.map(ordered[decode].groupby("run_id")["batch_size"].agg(_modal))
    typical = run.map(busy[decode].groupby(run[decode]).median())
    candidate = (
        decode
        & ordered.groupby("run_id")["kind"].shift(-1).eq("decode")  # rule 1
        & ordered["period_ms"].notna()
        & (sizes.eq(modal) | (sizes.isna() & modal.isna()))  # rule 2
        & (sizes.notna() | (busy * PREFILL_RATIO >= typical))  # rule 3
    )
    nth = candidate.groupby(run).cumsum()
    return ordered[candidate & (nth > warmup)].reset_index(drop=True)  # rule 4


def steady_steps(rank_steps: pd.DataFrame, warmup: int = WARMUP_STEPS) -> pd.DataFrame:
    """The rows of a tensor-parallel run's rank steps (one row per rank and step) in rank 0's steady
    state that every rank recorded: the same step ids on every rank."""
    lead = rank_steps[rank_steps["rank"] == 0]
    steady = steady_state(lead, warmup)[["run_id", "step"]]
    ranks = rank_steps.groupby("run_id")["rank"].nunique().rename("size")
    seen = rank_steps.groupby(["run_id", "step"]).size().rename("seen").reset_index()
    everywhere = seen.join(ranks, on="run_id").query("seen == size")[["run_id", "step"]]
    keep = steady.merge(everywhere, on=["run_id", "step"])
    return rank_steps.merge(keep, on=["run_id", "step"])


def _modal(sizes: pd.Series) -> float:
    """The most common batch size, the larger on a tie (a known size before an unknown one)."""
    counts = sizes.value_counts(dropna=False)
    best = counts.index[counts == counts.max()].dropna()
    return best.max() if len(best) else np.nan
