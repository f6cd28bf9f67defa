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
    """The per-step table of docs/phases.md for one run."""
    con = _open(catalog)
    if not con.execute("SELECT 1 FROM runs WHERE run_id = ?", [run_id]).fetchone():
        raise BubblelabError(f"no run {run_id} in the catalog")
    return queries.run(con, "per_step", {"run_id": run_id})


def per_step_from_timeline(timeline: Timeline, run_id: str, depth: int) -> pd.DataFrame:
    """The same per-step table from an in-process Timeline (no profiler needed)."""
    con = connect(None)
    ingest_timeline(timeline, con, {"depth": depth}, run_id=run_id)
    return per_step(con, run_id)


def steady_state(df: pd.DataFrame, warmup: int = WARMUP_STEPS) -> pd.DataFrame:
    """The steady-state rows of a per-step table (rule in profiling/sql/steady_state.sql)."""
    return queries.run(duckdb.connect(), "steady_state", {"warmup": warmup}, per_step=df)


def idle_gaps(catalog: Catalog, run_id: str, steps: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every GPU idle gap inside the given steps' periods, with the phase the host was in when it began."""
    con = _open(catalog)
    steps = steady_state(per_step(con, run_id)) if steps is None else steps
    return queries.run(con, "idle_gaps", {"run_id": run_id}, per_step=steps)


def attribution(catalog: Catalog, run_id: str, steps: pd.DataFrame | None = None) -> pd.DataFrame:
    """Idle time per host phase (time-weighted, and by the phase each gap began in)."""
    con = _open(catalog)
    gaps = idle_gaps(con, run_id, steps)
    return queries.run(con, "bubble_attribution", {"run_id": run_id}, idle_gaps=gaps)


def idle_histogram(catalog: Catalog, run_id: str, steps: pd.DataFrame | None = None) -> pd.DataFrame:
    return queries.run(duckdb.connect(), "idle_histogram", idle_gaps=idle_gaps(catalog, run_id, steps))


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


def _float(x: float) -> float | None:
    return None if pd.isna(x) else round(float(x), 6)


def _open(catalog: Catalog) -> duckdb.DuckDBPyConnection:
    if isinstance(catalog, duckdb.DuckDBPyConnection):
        return catalog
    if not Path(catalog).is_file():
        raise BubblelabError(f"no catalog at {catalog}")
    return connect(catalog)
