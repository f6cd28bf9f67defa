"""Answers that only a foreign run (steps found by profiling/steps.py, not by our NVTX ranges) has.

analysis.py asks `rule()` which kind of run it holds and routes each question to the SQL of that
kind (foreign_*.sql); the answers here summarise a foreign run's idle time and host syncs per step,
the way the nano-vllm write-up did by hand (its 909 us post-sampling bubble, 53% of the idle in it,
12% in gaps between kernels).
"""

from __future__ import annotations

import duckdb
import pandas as pd

from . import queries

OURS = "bubblelab"
UNTRACED = "untraced host code"
# A foreign run's host activity labels (host_activity.sql) roll up by their layer.
LAYERS = {"cuda": "CUDA API", "os": "OS runtime", "nvtx": "NVTX range (untraced code in it)"}


def rule(con: duckdb.DuckDBPyConnection, run_id: str) -> tuple[str, int | None]:
    """(step rule, kernel-gap threshold in ns) of a run; bubblelab runs have no threshold."""
    row = con.execute(
        "SELECT rule, gap_threshold_ns FROM step_rules WHERE run_id = ?", [run_id]
    ).fetchone()
    return (row[0], row[1]) if row else (OURS, None)


def is_foreign(con: duckdb.DuckDBPyConnection, run_id: str) -> bool:
    return rule(con, run_id)[0] != OURS


def gaps(
    con: duckdb.DuckDBPyConnection, run_id: str, steps: pd.DataFrame, bubble_only: bool = False
) -> pd.DataFrame:
    """Every idle gap of the given steps (step_gaps.sql), bubble or kernel gap, without labels."""
    return queries.run(con, "step_gaps", gap_params(con, run_id, bubble_only), per_step=steps)


def gap_params(con: duckdb.DuckDBPyConnection, run_id: str, bubble_only: bool = False) -> dict:
    """step_gaps.sql's parameters for a run: its threshold, and the shortest gap to read."""
    gap_ns = rule(con, run_id)[1]
    return {"run_id": run_id, "gap_ns": gap_ns, "min_ns": gap_ns if bubble_only else 0}


def bubble_gaps(con: duckdb.DuckDBPyConnection, run_id: str, steps: pd.DataFrame) -> pd.DataFrame:
    """The bubble of the given steps as intervals (step, start, end): their idle gaps above the
    threshold."""
    found = gaps(con, run_id, steps, bubble_only=True)
    return pd.DataFrame({"step": found["step"], "start": found["start_ns"], "end": found["end_ns"]})


def launch_handovers(
    con: duckdb.DuckDBPyConnection, run_id: str, steps: pd.DataFrame
) -> pd.DataFrame:
    """The idle gaps of the given steps between two launches, and every bubble gap (step,
    idle_us, kind_before, kind_after, queued, bubble, between_launches, start): whether the host
    launched the second late or it was already queued (sql/launch_handovers.sql;
    costmodel.foreign_handover prices them)."""
    params = {"run_id": run_id, "gap_ns": rule(con, run_id)[1]}
    return queries.run(con, "launch_handovers", params, per_step=steps)


def idle_gaps(
    con: duckdb.DuckDBPyConnection, run_id: str, steps: pd.DataFrame, bubble_only: bool = False
) -> pd.DataFrame:
    """The steps' gaps (step_gaps.sql), or only their bubble gaps (a million kernel gaps are not
    worth reading into pandas for a summary), with what the host was doing when each bubble gap
    began (foreign_idle_gaps.sql)."""
    found = gaps(con, run_id, steps, bubble_only)
    return queries.run(con, "foreign_idle_gaps", {"run_id": run_id}, gaps=found)


def attribution_inputs(
    con: duckdb.DuckDBPyConnection, run_id: str, steps: pd.DataFrame
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(bubble intervals, host segments over them) for bubble_attribution*.sql."""
    bubbles = bubble_gaps(con, run_id, steps)
    return bubbles, queries.run(con, "gap_activity", {"run_id": run_id}, bubbles=bubbles)


def sync_inventory(con: duckdb.DuckDBPyConnection, run_id: str) -> pd.DataFrame:
    """The run's host syncs (foreign_syncs.sql), each engine-thread row with the NVTX range it ran
    in."""
    return queries.run(con, "foreign_syncs", {"run_id": run_id})


def traced_graph_launches(con: duckdb.DuckDBPyConnection, run_id: str) -> pd.DataFrame:
    """The run's CUDA-graph launches, one row each: step, name, host_ms, whole (the replay traced as
    one row, --cuda-graph-trace=graph, rather than node by node) (sql/traced_graph_launches.sql)."""
    return queries.run(con, "traced_graph_launches", {"run_id": run_id})


def layer(label: str) -> str:
    """The top-level part of a foreign host-activity label: 'cuda: graph launch' -> 'CUDA API'."""
    return LAYERS.get(label.split(": ", 1)[0], label) if ": " in label else label


def idle_split(gaps: pd.DataFrame, steps: pd.DataFrame) -> dict:
    """A foreign run's idle time per step over the given steps (their per-step rows, whose
    kernel_gap_ms holds the gaps between kernels below the threshold, and their bubble gaps from
    foreign_idle_gaps.sql: kernel gaps among `gaps` are not read), split as the nano-vllm write-up
    split it: gaps between kernels, each step's longest bubble (the post-sampling host bookkeeping
    of a blocking loop), and the other bubbles; ms per step and shares."""
    n = len(steps)
    bubbles = gaps[gaps["within"].isna()]
    kernel_us = float(steps["kernel_gap_ms"].sum()) * 1e3
    if not n or (bubbles.empty and not kernel_us):
        return {}
    longest = bubbles.groupby("step")["idle_us"].max().sum()
    parts = {
        "kernel_gaps": kernel_us,
        "longest_bubble": longest,
        "other_bubbles": bubbles["idle_us"].sum() - longest,
    }
    total = sum(parts.values())
    return {
        "idle_ms_per_step": round(float(total) / 1e3 / n, 6),
        **{f"{k}_ms_per_step": round(float(v) / 1e3 / n, 6) for k, v in parts.items()},
        **{f"{k}_share": round(float(v / total), 6) if total else None for k, v in parts.items()},
    }


def sync_summary(inventory: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Host syncs per step of a foreign run (rows of foreign_sync_inventory.sql inside the given
    steps), one row per kind of sync: event, api, detail, whether it closes the step, the NVTX range
    and the kernel it followed; `per_step` = count / steps, `host_ms_per_step` = the host time
    blocked in it. Extra (flagged) kinds first: those are the syncs a blocking engine did not
    need."""
    columns = ["event", "api", "detail", "closing", "phase", "after"]
    rows = inventory[inventory["step"].isin(steps["step"])]
    if rows.empty or steps.empty:
        return pd.DataFrame(columns=[*columns, "count", "per_step", "host_ms_per_step", "flagged"])
    table = (
        rows.fillna({"after": "-"})
        .groupby(columns, dropna=False)
        .agg(count=("step", "size"), host_us=("host_us", "sum"), flagged=("flagged", "any"))
        .reset_index()
    )
    table["per_step"] = table["count"] / len(steps)
    table["host_ms_per_step"] = table.pop("host_us") / 1e3 / len(steps)
    return table.sort_values(["flagged", "count"], ascending=[False, False], ignore_index=True)
