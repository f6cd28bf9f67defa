"""The kernel-level view users of `nsys stats` and HTA expect, over a run in the catalog: the top
kernels by GPU time, each step kind's GPU time by class of work (GEMM, attention, sampling...), the
CUDA API summary, launch latency (API call to kernel start, per step and overall) and the whole
capture's split into compute, copies and idle time inside and between steps.

One query of profiling/sql/ each; `kernel_view` gathers them as `bubblelab analyze --kernels`
reports them. A CUDA-graph replay traced whole (nsys --cuda-graph-trace=graph) is one row named for
its graph: its kernels are not in the trace, and `untraced_graphs` says so.
"""

from __future__ import annotations

import duckdb
import pandas as pd

from . import queries
from .analysis import Catalog, _open
from .catalog import one_row

TOP = 15  # kernels listed by name; the rest are summed as one row


def top_kernels(catalog: Catalog, run_id: str, top: int = TOP) -> pd.DataFrame:
    """The `top` kernels by total GPU time (sql/top_kernels.sql): rank, kernel (the name shortened
    for display), name (in full), calls, total_ms, mean/p50/p90/p99/max_us and busy_share (of the
    GPU's busy time); the rest as one row named 'other N kernels'."""
    return queries.run(_open(catalog), "top_kernels", {"run_id": run_id, "top": top})


def kernel_classes(catalog: Catalog, run_id: str) -> pd.DataFrame:
    """Per step kind (prefill, decode, ...) and class of work (gemm, attention, sampling,
    elementwise, collective, copy, other): ops, total_ms, per_step_ms and share of the run's GPU
    time (sql/kernel_classes.sql). Where the forward's time goes, which the per-step table's spans
    do not say."""
    return queries.run(_open(catalog), "kernel_classes", {"run_id": run_id})


def cuda_api_summary(catalog: Catalog, run_id: str) -> pd.DataFrame:
    """Per CUDA API call name: calls, total_ms, mean/p50/p99/max_us and share of all API time
    (sql/cuda_api_summary.sql)."""
    return queries.run(_open(catalog), "cuda_api_summary", {"run_id": run_id})


def launches(catalog: Catalog, run_id: str) -> pd.DataFrame:
    """Every launch with its latency from the API call to its first kernel's start
    (sql/launch_latency.sql)."""
    return queries.run(_open(catalog), "launch_latency", {"run_id": run_id})


def launch_latency(catalog: Catalog, run_id: str) -> pd.DataFrame:
    """Launch latency's median, p90 and max per run, API call name and step
    (sql/launch_latency_summary.sql; the launches stay inside DuckDB)."""
    con = _open(catalog)
    rows = queries.relation(con, "launch_latency", {"run_id": run_id})
    return queries.run(con, "launch_latency_summary", launches=rows)


def run_split(catalog: Catalog, run_id: str) -> pd.DataFrame:
    """The whole capture's span as compute, copies, idle in steps and idle between steps: part, ms,
    share (sql/run_split.sql; the shares add up to 1)."""
    return queries.run(_open(catalog), "run_split", {"run_id": run_id})


def trace_ops(catalog: Catalog, run_id: str, steps: tuple[int, int] | None = None) -> pd.DataFrame:
    """Every kernel, copy and CUDA API call with the flow linking each launch to its first op
    (sql/trace_ops.sql): the export's kernel, copy and API tracks, in trace_ranges' columns plus
    correlation_id and flow. steps: (first, last), only what those steps launched."""
    first, last = steps if steps is not None else (None, None)
    params = {"run_id": run_id, "first_step": first, "last_step": last}
    return queries.run(_open(catalog), "trace_ops", params).assign(run_id=run_id)


def untraced_graphs(catalog: Catalog, run_id: str) -> str | None:
    """One line when the run's CUDA-graph replays were traced whole (their kernels unseen), else
    None."""
    sql = "SELECT count(*) FROM gpu_ops WHERE run_id = ? AND op = 'graph'"
    (replays,) = one_row(_open(catalog), sql, [run_id])
    if not replays:
        return None
    return (
        f"the kernels inside {replays} CUDA-graph replays were not traced (each is one row, "
        "'CUDA graph N [whole replay]'): re-profile with --cuda-graph-trace=node to see them"
    )


def kernel_view(con: duckdb.DuckDBPyConnection, run_id: str, top: int = TOP) -> dict:
    """The five answers as JSON-ready records: `top_kernels`, `kernel_classes`, `cuda_api`,
    `launch_latency` (the run, per API and per step) and `run_split`; `note`: untraced_graphs'
    line, or None."""
    return {
        "note": untraced_graphs(con, run_id),
        "top_kernels": _records(top_kernels(con, run_id, top)),
        "kernel_classes": _records(kernel_classes(con, run_id)),
        "cuda_api": _records(cuda_api_summary(con, run_id)),
        "launch_latency": _records(launch_latency(con, run_id)),
        "run_split": _records(run_split(con, run_id)),
    }


def _records(table: pd.DataFrame) -> list[dict]:
    """A table as records of Python values (numpy scalars unwrapped, NaN None, floats rounded)."""
    out = []
    for row in table.to_dict("records"):
        record = {}
        for key, value in row.items():
            if pd.isna(value):
                value = None
            elif hasattr(value, "item"):
                value = value.item()
            record[key] = round(value, 6) if isinstance(value, float) else value
        out.append(record)
    return out
