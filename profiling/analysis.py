"""Answers about ingested runs: the per-step table, steady state, bubble attribution, syncs, idle gaps, kernels.

Each function runs one query of profiling/sql/ against a catalog (a path, or an open connection for
in-memory catalogs). Attribution and idle-gap answers cover the steps you pass (default: steady state), so
their totals equal the sum of those steps' bubble_ms.
"""
from __future__ import annotations

from pathlib import Path

import duckdb
import pandas as pd

from engine.errors import BubblelabError
from profiling import queries
from profiling.catalog import connect
from profiling.ingest import ingest_timeline
from profiling.timeline import Timeline

Catalog = Path | str | duckdb.DuckDBPyConnection
WARMUP_STEPS = 5          # steady-state rule 3: steady candidates skipped at the start of a run
SUMMARY_COLUMNS = ("forward_ms", "sampling_ms", "bubble_ms", "period_ms", "busy_ms")


def per_step(catalog: Catalog, run_id: str) -> pd.DataFrame:
    """The per-step table of docs/phases.md for one run (computed by sql/per_step.sql at ingest)."""
    con = _open(catalog)
    if not con.execute("SELECT 1 FROM runs WHERE run_id = ?", [run_id]).fetchone():
        raise BubblelabError(f"no run {run_id} in the catalog")
    return con.execute("SELECT * FROM steps WHERE run_id = ? ORDER BY step", [run_id]).df()


def per_step_from_timeline(timeline: Timeline, run_id: str, depth: int) -> pd.DataFrame:
    """The same per-step table from an in-process Timeline (no profiler needed)."""
    con = connect(None)
    ingest_timeline(timeline, con, {"depth": depth}, run_id=run_id)
    return per_step(con, run_id)


def steady_state(df: pd.DataFrame, warmup: int = WARMUP_STEPS) -> pd.DataFrame:
    """The steady-state rows of a per-step table (rule in profiling/sql/steady_state.sql)."""
    return queries.run(duckdb.connect(), "steady_state", {"warmup": warmup}, per_step=df)


def idle_gaps(catalog: Catalog, run_id: str, steps: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every GPU idle gap inside the given steps' periods, with the phase the host was in when it began
    (at depth 1 that is mostly `wait`: the host learns the GPU is done only then; attribution() splits
    the same idle time by what the host did during it)."""
    con = _open(catalog)
    steps = steady_state(per_step(con, run_id)) if steps is None else steps
    return queries.run(con, "idle_gaps", {"run_id": run_id}, per_step=steps)


def attribution(catalog: Catalog, run_id: str, steps: pd.DataFrame | None = None) -> pd.DataFrame:
    """Idle time per host phase: what the engine thread was doing while the GPU sat idle (time-weighted)."""
    con = _open(catalog)
    steps = steady_state(per_step(con, run_id)) if steps is None else steps
    return queries.run(con, "bubble_attribution", {"run_id": run_id}, per_step=steps)


def idle_histogram(catalog: Catalog, run_id: str, steps: pd.DataFrame | None = None) -> pd.DataFrame:
    """Idle gaps of the given steps by length bucket (the gaps themselves stay inside DuckDB)."""
    con = _open(catalog)
    con.register("per_step", steady_state(per_step(con, run_id)) if steps is None else steps)
    try:
        gaps = queries.relation(con, "idle_gaps", {"run_id": run_id})
        return queries.run(con, "idle_histogram", idle_gaps=gaps)
    finally:
        con.unregister("per_step")


def sync_inventory(catalog: Catalog, run_id: str) -> pd.DataFrame:
    """Host-blocking calls and DtoH/pageable copies with their phase; `flagged` ones stall the pipeline."""
    return queries.run(_open(catalog), "sync_inventory", {"run_id": run_id})


def kernel_summary(catalog: Catalog, run_id: str) -> pd.DataFrame:
    return queries.run(_open(catalog), "kernel_summary", {"run_id": run_id})


def runs(catalog: Catalog) -> pd.DataFrame:
    return _open(catalog).execute("SELECT * EXCLUDE (content_hash) FROM runs ORDER BY depth, streams, run_id").df()


def summarize(df: pd.DataFrame) -> dict:
    """Median and p10/p90 of the per-step times (pass steady-state rows), plus the bubble's share of the period."""
    summary: dict = {"steps": len(df)}
    for column in SUMMARY_COLUMNS:
        values = df[column].dropna()
        summary[column] = {"median": _float(values.median()), "p10": _float(values.quantile(0.1)),
                           "p90": _float(values.quantile(0.9))}
    period = df["period_ms"].sum()
    summary["bubble_share"] = _float(df["bubble_ms"].sum() / period) if period else None
    return summary


def analyze(catalog: Catalog, run_ids: list[str] | None = None, warmup: int = WARMUP_STEPS) -> dict:
    """Steady-state summary and bubble attribution per run, and pooled per (depth, streams).

    A run without `streams` metadata gets its steady-state batch size (the streams of a closed loop).
    """
    con = _open(catalog)
    meta = runs(con).set_index("run_id")
    per_run, steady, idle, gaps = [], {}, {}, {}
    for run_id in meta.index.tolist() if run_ids is None else run_ids:
        run = meta.loc[run_id]
        steady[run_id] = steady_state(per_step(con, run_id), warmup)
        idle[run_id] = attribution(con, run_id, steady[run_id])
        gaps[run_id] = idle_gaps(con, run_id, steady[run_id])
        streams = run.streams if pd.notna(run.streams) else steady[run_id].batch_size.mode().max()
        per_run.append({"run_id": run_id, "model": run.model, "device": run.device, "source": run.source,
                        "depth": _int(run.depth), "streams": _int(streams),
                        **_digest([steady[run_id]], [idle[run_id]], [gaps[run_id]]),
                        "flagged_syncs": int(sync_inventory(con, run_id).flagged.sum())})
    groups = []
    for depth, streams in sorted({(r["depth"], r["streams"]) for r in per_run}, key=str):
        members = [r["run_id"] for r in per_run if (r["depth"], r["streams"]) == (depth, streams)]
        groups.append({"depth": depth, "streams": streams, "runs": members,
                       **_digest(*([d[m] for m in members] for d in (steady, idle, gaps)))})
    return {"warmup_steps": warmup, "runs": per_run, "groups": groups}


def _digest(steady: list[pd.DataFrame], idle: list[pd.DataFrame], gaps: list[pd.DataFrame]) -> dict:
    """summarize() of the pooled steady steps, their idle time per host phase per step, and the share of it
    in gaps the host ended late (launched the next work only after the GPU had gone idle)."""
    steps, gaps = pd.concat(steady), pd.concat(gaps)
    totals = pd.concat(idle).groupby("phase").idle_ms.sum().sort_values(ascending=False)
    per_step_ms = {phase: round(ms / len(steps), 6) for phase, ms in totals.items()} if len(steps) else {}
    known = gaps[gaps.launch_lag_us.notna()]
    late = known.idle_us[known.launch_lag_us > 0].sum() / known.idle_us.sum() if len(known) else None
    return {**summarize(steps), "attribution_ms_per_step": per_step_ms,
            "host_late_share": None if late is None else _float(late)}


def _int(x) -> int | None:
    return None if x is None or pd.isna(x) else int(x)


def _float(x: float) -> float | None:
    return None if pd.isna(x) else round(float(x), 6)


def _open(catalog: Catalog) -> duckdb.DuckDBPyConnection:
    if isinstance(catalog, duckdb.DuckDBPyConnection):
        return catalog
    if not Path(catalog).is_file():
        raise BubblelabError(f"no catalog at {catalog}")
    return connect(catalog)
