"""Several run directories or results files as one `Results`: each named by its folder, its run
ids prefixed, its configurations kept apart (one sweep's depth-1 and depth-2 halves excepted)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from ..core.errors import BubblelabError
from .rundir import RESULTS_FILE, TABLES, Results, is_results_file, load_runs


def load_sources(sources: list[Path]) -> Results:
    """One source as load_runs reads it, or several as one Results (merge_results), each named by
    its folder (distinct_names): each source's runs pair among themselves."""
    if len(sources) == 1:
        return load_runs(sources[0])
    return merge_results(dict(zip(distinct_names(sources), map(load_runs, sources), strict=True)))


def distinct_names(paths: list[Path]) -> list[str]:
    """Each path's name, with as many parent folders as it takes to tell them apart; a results
    file's without .results.json[.gz] (d1.results.json.gz: d1; DIR/results.json: DIR)."""

    def parts(path: Path) -> tuple[str, ...]:
        *folders, name = path.resolve().parts
        if is_results_file(path):
            name = name.removesuffix(".gz").removesuffix(RESULTS_FILE).removesuffix(".")
        return (*folders, name) if name else tuple(folders)

    for depth in range(1, max(len(parts(p)) for p in paths) + 1):
        names = ["/".join(parts(p)[-depth:]) for p in paths]
        if len(set(names)) == len(names):
            return names
    raise BubblelabError(
        f"the same run directory is given twice: {json.dumps([str(p) for p in paths])}"
    )


def merged_id(source: str, run_id: str) -> str:
    """A run's id in merge_results' tables: its source's name first (ids repeat across sources)."""
    return f"{source}/{run_id}"


def merge_results(named: dict[str, Results]) -> Results:
    """Several run directories as one Results (one report for a whole sweep).

    Each name becomes its runs' `preset` (so configurations of different directories never pair up,
    e.g. the same model on two commits) and `run_dir`, and prefixes their run ids, which repeat
    across directories; one sweep's depth-1 and depth-2 halves share a preset and pair
    (runs.split_sweep).
    """
    from .split_sweep import split_sweep

    halves = split_sweep(named)  # one sweep's depth-1 and depth-2 halves: they pair
    merged: dict[str, list[pd.DataFrame]] = {name: [] for name in TABLES}
    for source, results in named.items():
        for name in TABLES:
            table = getattr(results, name)
            if table.empty:
                continue
            table = table.copy()
            if "run_id" in table:
                table["run_id"] = [merged_id(source, r) for r in table["run_id"].astype(str)]
            if name == "runs":
                table["run_dir"] = source
                table["preset"] = "+".join(halves) if halves else source
            merged[name].append(table)
    tables = {
        name: pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
        for name, parts in merged.items()
    }
    provenance: dict[str, Any] = {"sources": {s: r.provenance for s, r in named.items()}}
    if halves:
        provenance["split_sweep"] = list(halves)
    return Results(**tables, provenance=provenance)
