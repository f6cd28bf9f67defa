"""Several run directories side by side (`bubblelab report DIR1 DIR2 ...`): the same model at the
same stream count, measured on different machines or commits, one column per directory.

The merged results keep each directory's runs apart (runs.merge.merge_results names them by
directory), so the prediction table has one row per directory and configuration; here rows that
share a model and stream count line up.
"""

from __future__ import annotations

import pandas as pd

from ..core.words import counted
from ..runs.rundir import Results
from .provenance import device_names

CELLS = (
    "observed_pct",
    "observed_lo",
    "observed_hi",
    "predicted_pct",
    "blocking_ms",
    "pipelined_ms",
)


def side_by_side(results: Results, predictions: pd.DataFrame) -> dict | None:
    """None for one directory or one sweep's two halves (runs.split_sweep); else {"sources":
    [{name, devices, revision}], "rows": [{key, cells: {source: {observed_pct, ...}}}]}, rows only
    for a model and stream count measured in two or more directories."""
    runs = results.runs
    if "run_dir" not in runs or runs["run_dir"].nunique() < 2 or predictions.empty:
        return None
    if results.provenance.get("split_sweep"):  # one sweep in two halves: nothing to set beside
        return None
    names = list(dict.fromkeys(runs["run_dir"]))
    by_id = runs.set_index("run_id")
    cells: dict[str, dict[str, dict]] = {}
    for row in predictions.to_dict("records"):
        run = by_id.loc[str(row["runs_block"]).split(",")[0]]
        streams = int(run["streams"])
        key = f"{run['model']} · {counted(streams, 'stream')}"
        cells.setdefault(key, {})[run["run_dir"]] = {c: row.get(c) for c in CELLS}
    rows = [{"key": k, "cells": by_source} for k, by_source in cells.items() if len(by_source) >= 2]
    shown = [n for n in names if any(n in row["cells"] for row in rows)] or names
    sources = results.provenance.get("sources")
    sources = sources if isinstance(sources, dict) else {}
    return {
        "sources": [
            {
                "name": name,
                "devices": ", ".join(device_names(runs[runs["run_dir"] == name])),
                "revision": _revision(sources.get(name)),
            }
            for name in shown
        ],
        "rows": rows,
    }


def _revision(provenance: object) -> str | None:
    machine = provenance.get("machine") if isinstance(provenance, dict) else None
    return machine.get("git_revision") if isinstance(machine, dict) else None
