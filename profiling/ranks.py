"""The ranks of a tensor-parallel run side by side: a table per rank and a cross-rank view per step.

A tensor-parallel run is one catalog run per rank (profiling/sql/tp_groups.sql finds them: the
in-process timelines run-and-profile stores as `<rank 0's run>-rank<r>`, or the processes of one
nsys export, ranked at ingest). Its steps are matched across ranks by id (the NVTX payload, or the
timeline's step), on the clock every rank shares. The answers, each from a query of profiling/sql/:

- rank_steps: every rank's per-step table with the step's GPU spans and host phases in time, and
  its kernels split into compute and communication (tp_rank_steps.sql, comm_vs_compute.sql);
- stragglers: per step, which rank's GPU and which rank's host finished it last, and by how much
  (tp_straggler.sql); skew: the spread between ranks of each step's forward and host phases
  (tp_skew.sql);
- per_rank: one row per rank over chosen steps: medians, its lag behind rank 0, how often it was
  the straggler (tp_per_rank.sql); analyze_ranks adds what each rank's host was doing during its
  bubble, by time and by where each gap began (profiling.analysis.attribution on that rank's run).

The steps summarised are rank 0's steady state (core.steady.steady_steps), the same step ids on
every rank.
"""

from __future__ import annotations

import duckdb
import pandas as pd

from ..core.errors import BubblelabError
from ..core.steady import WARMUP_STEPS, steady_steps
from . import queries
from .analysis import SPLITS, Catalog, _open, attribution, ms_per_step, per_step
from .catalog import OFFLINE

# Collective kernels by name: NCCL's (ncclDevKernel_AllReduce_Sum_bf16_RING_LL, ncclKernel_...).
COMM_KERNELS = "(?i)nccl"
SKEW_COLUMNS = (
    "forward_start_skew_ms",
    "forward_end_skew_ms",
    "sampling_end_skew_ms",
    "launch_start_skew_ms",
    "launch_end_skew_ms",
    "finalize_start_skew_ms",
    "finalize_end_skew_ms",
)


def rank_run_id(run_id: str, rank: int) -> str:
    """The catalog run holding rank `rank`'s in-process timeline of run `run_id` (rank 0's)."""
    return run_id if rank == 0 else f"{run_id}-rank{rank}"


def tp_groups(catalog: Catalog, run_ids: list[str] | None = None) -> pd.DataFrame:
    """The catalog's tensor-parallel runs, one row per rank: run_id (rank 0's run), rank,
    rank_run_id. run_ids: only the runs whose rank 0 is among them."""
    groups = queries.run(_open(catalog), "tp_groups")
    return groups if run_ids is None else groups[groups["run_id"].isin(run_ids)]


def rank_steps(catalog: Catalog, run_id: str) -> pd.DataFrame:
    """Every rank's steps of the tensor-parallel run whose rank 0 is `run_id` (tp_rank_steps.sql):
    one row per rank and step."""
    con = _open(catalog)
    members = tp_groups(con, [run_id])
    if members.empty:
        raise BubblelabError(f"{run_id} is not rank 0 of a tensor-parallel run in the catalog")
    return _side_by_side(con, members, "tp_rank_steps", every_phase=False)


def split_rank_steps(catalog: Catalog, run_ids: list[str]) -> pd.DataFrame:
    """The ranks of another engine split over GPUs (profiling/sql/split_engines.sql: its processes'
    runs, in the order of their GPUs) side by side, in rank_steps' shape: each rank's steps matched
    to rank 0's by the GPU time they share (split_rank_steps.sql), `own_step` its own number."""
    con = _open(catalog)
    members = pd.DataFrame({"run_id": run_ids[0], "rank": range(len(run_ids)),
                            "rank_run_id": run_ids})  # fmt: skip
    return _side_by_side(con, members, "split_rank_steps", every_phase=True)


def _side_by_side(
    con: duckdb.DuckDBPyConnection, members: pd.DataFrame, query: str, every_phase: bool
) -> pd.DataFrame:
    """`query` over the ranks `members` (relation tp_ranks) with each rank-step's collectives
    (comm_vs_compute.sql; every_phase: every kernel of a step, for runs without our phases)."""
    con.register("tp_ranks", members)
    try:
        params = {"comm_kernels": COMM_KERNELS, "every_phase": every_phase}
        comm = queries.relation(con, "comm_vs_compute", params)
        return queries.run(con, query, comm=comm)
    finally:
        con.unregister("tp_ranks")


def stragglers(steps: pd.DataFrame) -> pd.DataFrame:
    """Per run and step, the rank whose GPU and whose host finished it last (tp_straggler.sql)."""
    return queries.run(duckdb.connect(config=OFFLINE), "tp_straggler", rank_steps=steps)


def skew(steps: pd.DataFrame) -> pd.DataFrame:
    """Per run and step, the spread between ranks of its forward and host phases (tp_skew.sql)."""
    return queries.run(duckdb.connect(config=OFFLINE), "tp_skew", rank_steps=steps)


def per_rank(steps: pd.DataFrame) -> pd.DataFrame:
    """One row per run and rank over the given steps: medians, lag behind rank 0, straggler
    shares (tp_per_rank.sql)."""
    con = duckdb.connect(config=OFFLINE)
    return queries.run(con, "tp_per_rank", rank_steps=steps, stragglers=stragglers(steps))


def summary(steps: pd.DataFrame, warmup: int = WARMUP_STEPS) -> list[dict]:
    """Per tensor-parallel run in `steps` (rank_steps of one or more runs): its ranks over rank 0's
    steady steps (per_rank), the straggler and skew in figures (median, p90, max), and the
    cross-rank view of every steady step. Needs no catalog: the report builds it from
    results.json's `ranks` table."""
    steady = steady_steps(steps, warmup)
    out = []
    for run_id, mine in steps.groupby("run_id", sort=True):
        chosen = steady[steady["run_id"] == run_id]
        late, spread = stragglers(chosen), skew(chosen)
        view = late.merge(spread.drop(columns="ranks"), on=["run_id", "step"], how="outer")
        view = view.merge(
            chosen[chosen["rank"] == 0][["step", "kind", "batch_size"]], on="step", how="left"
        )
        out.append(
            {
                "run_id": run_id,
                "ranks": int(mine["rank"].nunique()),
                "steady_steps": int(chosen["step"].nunique()),
                "per_rank": records(per_rank(chosen)),
                "straggler": {
                    c: _stats(late[c]) for c in ("gpu_extra_ms", "gpu_margin_ms", "host_extra_ms")
                },
                "skew": {c: _stats(spread[c]) for c in SKEW_COLUMNS},
                "steps": records(view.drop(columns="run_id")),
            }
        )
    return out


def rank_attribution(catalog: Catalog, steps: pd.DataFrame) -> pd.DataFrame:
    """What each rank's host was doing during its bubble, over the given rank_steps rows (one run
    or several): run_id, rank, phase, top_level and attribution's two splits, time_ms and began_ms
    (on each rank's own run and its own bubble)."""
    con = _open(catalog)
    frames = []
    for (run_id, rank, rank_run), rows in steps.groupby(["run_id", "rank", "rank_run_id"]):
        mine = per_step(con, rank_run)
        table = attribution(con, rank_run, mine[mine["step"].isin(rows["step"])])
        frames.append(table.assign(run_id=run_id, rank=rank))
    columns = ["run_id", "rank", "phase", "top_level", *SPLITS]
    return (
        pd.concat(frames, ignore_index=True)[columns] if frames else pd.DataFrame(columns=columns)
    )


def analyze_ranks(
    catalog: Catalog, run_ids: list[str] | None = None, warmup: int = WARMUP_STEPS
) -> list[dict]:
    """summary() of every tensor-parallel run in the catalog (whose rank 0 is in run_ids, when
    given), each rank with its bubble by host phase per steady step (`attribution_ms_per_step`:
    analysis.ms_per_step, by time and by where each gap began)."""
    con = _open(catalog)
    out = []
    for run_id in tp_groups(con, run_ids)["run_id"].unique().tolist():
        steps = rank_steps(con, run_id)
        (entry,) = summary(steps, warmup)
        steady = steady_steps(steps, warmup)
        shares = rank_attribution(con, steady)
        for row in entry["per_rank"]:
            mine = shares[shares["rank"] == row["rank"]]
            row["attribution_ms_per_step"] = ms_per_step(mine, max(1, row["steps"]))
        out.append(entry)
    return out


def records(table: pd.DataFrame) -> list[dict]:
    """A table as JSON-ready records (numpy scalars to Python, NaN to None)."""
    return [
        {k: (None if pd.isna(v) else v.item() if hasattr(v, "item") else v) for k, v in row.items()}
        for row in table.to_dict("records")
    ]


def _stats(values: pd.Series) -> dict:
    v = pd.to_numeric(values, errors="coerce").dropna()
    if v.empty:
        return {"median": None, "p90": None, "max": None}
    return {
        k: round(float(x), 6)
        for k, x in (("median", v.median()), ("p90", v.quantile(0.9)), ("max", v.max()))
    }
