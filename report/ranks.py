"""The report's tensor-parallel section: per configuration and depth, a row per rank (its steady
state medians, its lag behind rank 0, how often it was the straggler, where its bubble went) and
the skew between ranks, pooled over repeats like the step table (the median of the runs' medians).

Read from results.json's `ranks` and `rank_attribution` tables through profiling.ranks.summary, the
same numbers `bubblelab analyze` prints for each run.
"""

from __future__ import annotations

import pandas as pd

from ..costmodel.configs import known_int
from ..profiling.ranks import summary
from ..runs.rundir import Results
from .labels import run_name

VALUES = (
    "forward_ms",
    "sampling_ms",
    "bubble_ms",
    "comm_ms",
    "forward_lag_ms",
    "gpu_straggler_share",
    "host_straggler_share",
)
SKEWS = ("forward_start_skew_ms", "forward_end_skew_ms", "launch_start_skew_ms")


def rank_sections(results: Results) -> list[dict]:
    """One record per tensor-parallel configuration and depth: config, depth, runs, ranks (a record
    per rank: VALUES, `bubble_in` its largest bubble phase and `bubble_share` of its bubble there),
    gpu_extra_ms (the straggler's GPU after rank 0's) and the SKEWS, medians over the runs."""
    if results.ranks.empty:
        return []
    by_run = {s["run_id"]: s for s in summary(results.ranks)}
    runs = results.runs[results.runs["run_id"].isin(by_run)]
    sections = []
    for (config, depth), group in runs.groupby(
        [runs.apply(run_name, axis=1, depth=False), runs["depth"].map(known_int)], sort=False
    ):
        mine = [by_run[r] for r in group["run_id"]]
        per_rank = pd.DataFrame([row for s in mine for row in s["per_rank"]])
        ranks = []
        for rank, rows in per_rank.groupby("rank"):
            record = {"rank": int(rank), **{v: _median(rows[v]) for v in VALUES}}
            record.update(_largest_phase(results.rank_attribution, group["run_id"], int(rank)))
            ranks.append(record)
        sections.append(
            {
                "config": config,
                "depth": depth,
                "runs": len(mine),
                "steps": int(sum(s["steady_steps"] for s in mine)),
                "ranks": ranks,
                "comm": any(r["comm_ms"] is not None for r in ranks),
                "gpu_extra_ms": _median(
                    pd.Series([s["straggler"]["gpu_extra_ms"]["median"] for s in mine])
                ),
                **{k: _median(pd.Series([s["skew"][k]["median"] for s in mine])) for k in SKEWS},
            }
        )
    return sections


def _largest_phase(attribution: pd.DataFrame, run_ids: pd.Series, rank: int) -> dict:
    """The host phase a rank's bubble went to most over the runs (by where its time went; by where
    its gaps began in a results file that kept only that), with its share of that bubble."""
    if attribution.empty:
        return {"bubble_in": None, "bubble_share": None}
    mine = attribution[attribution["run_id"].isin(run_ids) & (attribution["rank"] == rank)]
    split = "time_ms" if mine["time_ms"].notna().any() else "began_ms"
    totals = mine.groupby("phase")[split].sum().sort_values(ascending=False)
    if totals.empty or totals.sum() <= 0:
        return {"bubble_in": None, "bubble_share": None}
    return {"bubble_in": str(totals.index[0]), "bubble_share": float(totals.iloc[0] / totals.sum())}


def _median(values: pd.Series) -> float | None:
    v = pd.to_numeric(values, errors="coerce").dropna()
    return float(v.median()) if len(v) else None
