"""Answers about ingested runs: the per-step table, steady state, bubble attribution, syncs, idle
gaps, kernels.

Each function runs one query of profiling/sql/ against a catalog (a path, or an open connection for
in-memory catalogs). Attribution and idle-gap answers cover the steps you pass (default: steady
state): the attribution's two splits each add up to those steps' bubble_ms, the idle gaps to their
period - busy. A foreign run (steps found by profiling/steps.py) gets the same answers, with the
same columns, from its own queries (foreign_*.sql): its bubble is the idle gaps above the
kernel-gap threshold, and its "phases" are what the engine thread was doing (host_activity.sql).
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pandas as pd

from ..core.errors import BubblelabError
from ..core.steady import steady_state
from ..core.timeline import Timeline
from . import foreign, queries
from .catalog import connect
from .ingest import ingest_timeline

Catalog = Path | str | duckdb.DuckDBPyConnection
SUMMARY_COLUMNS = (
    "forward_ms",
    "sampling_ms",
    "bubble_ms",
    "kernel_gap_ms",
    "period_ms",
    "busy_ms",
)
# The two splits of the bubble by host phase (sql/bubble_attribution.sql): where its time went (the
# headline) and where each idle gap began.
SPLITS = ("time_ms", "began_ms")
# Nested phases roll up into the loop's top-level parts (docs/phases.md); plan and commit have no
# children but `wait`, and time outside any phase stays itself.
TOP_LEVEL = {
    "wait": "commit",
    "copy_h2d": "launch",
    "forward": "launch",
    "prefill": "launch",
    "mask": "finalize",
    "sampling": "finalize",
    "copy_d2h": "finalize",
}


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


def idle_gaps(
    catalog: Catalog, run_id: str, steps: pd.DataFrame | None = None, bubble_only: bool = False
) -> pd.DataFrame:
    """Every GPU idle gap (all streams idle) inside the given steps' periods: `within` a forward or
    sampling span (a launch gap between kernels) or between them (bubble), the phase the host was in
    when it began, and whether the host launched the work ending it only after the GPU went idle
    (launch_lag_us > 0). bubble_only: the bubble's gaps alone (a million-kernel trace has about a
    million launch gaps)."""
    con = _open(catalog)
    steps = steady_state(per_step(con, run_id)) if steps is None else steps
    if foreign.is_foreign(con, run_id):
        return foreign.idle_gaps(con, run_id, steps, bubble_only)
    params = {"run_id": run_id, "bubble_only": bubble_only}
    return queries.run(con, "idle_gaps", params, per_step=steps)


def bubble_intervals(
    catalog: Catalog, run_id: str, steps: pd.DataFrame | None = None
) -> pd.DataFrame:
    """The bubble of the given steps as intervals (step, start, end): each period minus the step's
    forward and sampling spans; for a foreign run, its idle gaps above the kernel-gap threshold."""
    con = _open(catalog)
    steps = steady_state(per_step(con, run_id)) if steps is None else steps
    if foreign.is_foreign(con, run_id):
        return foreign.bubble_gaps(con, run_id, steps)
    return queries.run(con, "bubble_intervals", {"run_id": run_id}, per_step=steps)


def attribution(catalog: Catalog, run_id: str, steps: pd.DataFrame | None = None) -> pd.DataFrame:
    """Bubble per host phase, two splits side by side (sql/bubble_attribution.sql): `time_ms`, what
    the host was doing during each instant of the idle time (the headline: what you would have to
    make faster), and `began_ms`, each idle interval to the innermost phase open when it began.
    Each adds up to the steps' bubble_ms. Columns run_id, phase, top_level, time_ms, began_ms,
    time_share, began_share (SPLITS)."""
    con = _open(catalog)
    steps = steady_state(per_step(con, run_id)) if steps is None else steps
    if foreign.is_foreign(con, run_id):
        intervals, segments = foreign.attribution_inputs(con, run_id, steps)
        params = {"run_id": run_id, "outside": foreign.UNTRACED}
        table = queries.run(
            con, "bubble_attribution", params, bubble_intervals=intervals, segments=segments
        )
    else:
        params = {"run_id": run_id, "outside": "outside any phase"}
        con.register("per_step", steps)
        try:
            intervals = queries.relation(con, "bubble_intervals", {"run_id": run_id})
            segments = queries.relation(con, "engine_segments", {"run_id": run_id})
            table = queries.run(
                con, "bubble_attribution", params, bubble_intervals=intervals, segments=segments
            )
        finally:
            con.unregister("per_step")
    table.insert(2, "top_level", table.phase.map(top_level))
    return table


def top_level(phase: str) -> str:
    """The loop part a phase rolls up into (TOP_LEVEL), or a foreign label's layer
    (foreign.layer)."""
    return TOP_LEVEL.get(phase) or foreign.layer(phase)


def lane_ranges(
    catalog: Catalog, run_id: str, steps: pd.DataFrame, min_gap_ns: int = 20_000
) -> pd.DataFrame:
    """Host ranges and GPU islands of the given steps (sql/lane_ranges.sql), for the lane chart. GPU
    idle shorter than min_gap_ns is drawn as busy: a pixel of a chart tens of milliseconds wide is
    ~100 us."""
    if steps.empty:
        return pd.DataFrame()
    params = {
        "run_id": run_id,
        "first": int(steps["step"].min()),
        "last": int(steps["step"].max()),
        "min_gap_ns": min_gap_ns,
    }
    con = _open(catalog)
    query = "foreign_lane_ranges" if foreign.is_foreign(con, run_id) else "lane_ranges"
    return queries.run(con, query, params).assign(run_id=run_id)


def trace_ranges(catalog: Catalog, run_id: str) -> pd.DataFrame:
    """Every host range and every step's forward and sampling span of a run
    (sql/trace_ranges.sql): what a timeline viewer shows, for the Chrome/Perfetto export."""
    return queries.run(_open(catalog), "trace_ranges", {"run_id": run_id}).assign(run_id=run_id)


def middle(steps: pd.DataFrame, n: int) -> pd.DataFrame:
    """n consecutive rows from the middle of a (steady-state) per-step table."""
    steps = steps.sort_values("step")
    start = max(0, len(steps) // 2 - n // 2)
    return steps.iloc[start : start + n]


def rollup(table: pd.DataFrame) -> pd.DataFrame:
    """An attribution table's splits (time_ms, began_ms) per top-level part of the loop (plan,
    launch, finalize, commit), largest time first."""
    columns = [c for c in SPLITS if c in table]
    return table.groupby("top_level")[columns].sum().sort_values(columns, ascending=False)


def ms_per_step(table: pd.DataFrame, n: int) -> dict:
    """An attribution table (of one run, or pooled) as bubble ms per step over n steps, each split
    by phase and by top-level part: {"time": {"phase": {...}, "top_level": {...}}, "began": ...},
    largest first; what `bubblelab analyze --json` reports."""
    out: dict = {}
    for column in SPLITS:
        split = column.removesuffix("_ms")
        out[split] = {}
        for level in ("phase", "top_level"):
            totals = table.groupby(level)[column].sum().sort_values(ascending=False)
            out[split][level] = {
                key: round(ms / n, 6) for key, ms in totals.items() if n and ms > 0
            }
    return out


def idle_histogram(
    catalog: Catalog, run_id: str, steps: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Idle gaps of the given steps by length bucket (the gaps themselves stay inside DuckDB)."""
    con = _open(catalog)
    steps = steady_state(per_step(con, run_id)) if steps is None else steps
    if foreign.is_foreign(con, run_id):
        con.register("per_step", steps)  # the gaps stay in DuckDB: a million of them, perhaps
        try:
            gaps = queries.relation(con, "step_gaps", foreign.gap_params(con, run_id))
            return queries.run(con, "idle_histogram", idle_gaps=gaps)
        finally:
            con.unregister("per_step")
    con.register("per_step", steps)
    try:
        gaps = queries.relation(con, "idle_gaps", {"run_id": run_id, "bubble_only": False})
        return queries.run(con, "idle_histogram", idle_gaps=gaps)
    finally:
        con.unregister("per_step")


def wake_latency(catalog: Catalog, run_id: str) -> pd.DataFrame:
    """Per step whose wait blocked: microseconds from the step's last GPU op (the copy of its
    sampled ids) to the host returning from the wait. Meaningful for nsys runs only
    (sql/wake_latency.sql says why)."""
    return queries.run(_open(catalog), "wake_latency", {"run_id": run_id})


def sync_inventory(catalog: Catalog, run_id: str) -> pd.DataFrame:
    """Host-blocking calls and DtoH/pageable copies with their phase; `flagged` ones stall the
    pipeline. A foreign run's rows also say which sync point closes each step, the bytes and the
    kernel before."""
    con = _open(catalog)
    if foreign.is_foreign(con, run_id):
        return foreign.sync_inventory(con, run_id)
    return queries.run(con, "sync_inventory", {"run_id": run_id})


def kernel_summary(catalog: Catalog, run_id: str) -> pd.DataFrame:
    return queries.run(_open(catalog), "kernel_summary", {"run_id": run_id})


def runs(catalog: Catalog) -> pd.DataFrame:
    return (
        _open(catalog)
        .execute("SELECT * EXCLUDE (content_hash) FROM runs ORDER BY depth, streams, run_id")
        .df()
    )


def summarize(df: pd.DataFrame) -> dict:
    """Median and p10/p90 of the per-step times (pass steady-state rows), plus the bubble's share of
    the period."""
    summary: dict = {"steps": len(df)}
    for column in SUMMARY_COLUMNS:
        values = df[column].dropna()
        summary[column] = {
            "median": _float(values.median()),
            "p10": _float(values.quantile(0.1)),
            "p90": _float(values.quantile(0.9)),
        }
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
