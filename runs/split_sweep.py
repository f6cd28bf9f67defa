"""One sweep run in two: a directory of depth-1 runs and one of depth-2 runs, made with the same
options (`run-and-profile --depth 1`, its forecast read, then `--depth 2` to check it).

Run directories given together stay apart (runs.merge.merge_results: their configurations never
pair), but these two are one sweep's halves, so their runs pair up by repeat: each repeat's seed,
and so its requests, is the same in both. What the split costs is said where the pairs are used
(split_line): each half ran in its own process, with its own draw of the host's speed.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

# Options of the repeat rule and the profiler: how many runs were made, not what each run did.
HOW_MANY = ("depths", "repeats", "min_repeats", "budget_s", "out_of_reach", "processes",
            "nsys_repeats", "nsys_depths", "cuda_graph_trace")  # fmt: skip


def _depths(runs: pd.DataFrame) -> set[int]:
    return {int(d) for d in pd.to_numeric(runs.get("depth"), errors="coerce").dropna()}


def _what_ran(results: Any) -> dict[str, Any] | None:
    spec = results.provenance.get("sweep")
    return {k: v for k, v in spec.items() if k not in HOW_MANY} if isinstance(spec, dict) else None


def split_sweep(named: dict[str, Any]) -> tuple[str, str] | None:
    """(depth 1's name, depth 2's) when the sources (runs.rundir.Results by name) are one sweep's
    two halves: two sweeps, one all at depth 1 and one all at depth 2, whose options agree but
    for HOW_MANY; else None."""
    if len(named) != 2:
        return None
    by_depth = {}
    for name, results in named.items():
        depths = _depths(results.runs) if not results.runs.empty else set()
        if len(depths) != 1 or _what_ran(results) is None:
            return None
        by_depth[depths.pop()] = (name, results)
    if set(by_depth) != {1, 2} or _what_ran(by_depth[1][1]) != _what_ran(by_depth[2][1]):
        return None
    return by_depth[1][0], by_depth[2][0]


def split_line(provenance: dict[str, Any]) -> str | None:
    """What pairing a split sweep's halves leaves uncertain (merge_results records them)."""
    halves = provenance.get("split_sweep")
    if not halves:
        return None
    return (
        f"{halves[0]} (depth 1) and {halves[1]} (depth 2) are one sweep run in two, with the same "
        "options: their runs pair by repeat on the same requests, but each half ran in a process "
        "of its own, with its own draw of the host's speed, so the observed speedup holds the "
        "difference between the two draws too (docs/measurements.md §7); run --depth 1,2 to "
        "interleave them in one process"
    )
