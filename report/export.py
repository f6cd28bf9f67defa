"""`bubblelab export`: a run directory or a trace as a Chrome/Perfetto trace and Parquet tables.

    OUT/trace.json.gz     open in ui.perfetto.dev or chrome://tracing (report.perfetto)
    OUT/<table>.parquet   runs, steps, gaps, attribution; kernels, api (report.parquet)

The report writes the same files beside itself (REPORT_DIR/export/) and links them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..profiling.analysis import trace_ranges
from ..profiling.kernels import cuda_api_summary, top_kernels, trace_ops
from ..runs.catalogs import rank_runs
from ..runs.rundir import Results
from ..runs.sources import Source, open_source
from .parquet import write_parquet
from .perfetto import chrome_trace, write_chrome_trace

TRACE_FILE = "trace.json.gz"


@dataclass
class Exported:
    trace: Path
    tables: list[Path]
    every_step: bool  # host ranges of every step (a catalog was at hand), or results.json's window


def export(source: Path | str | None, out_dir: Path | str) -> Exported:
    """Export a run directory, an nsys SQLite export, or (None) the committed traces into
    out_dir."""
    opened = open_source(source)
    return export_results(opened.results, Path(out_dir), ranges_of([opened]), op_tables([opened]))


def default_out_dir(source: Path) -> Path:
    """SOURCE/export for a run directory; NAME-export in the working folder for a trace."""
    if source.is_dir():
        return source / "export"
    return Path(source.name.removesuffix(".gz").removesuffix(".sqlite") + "-export")


def export_results(
    results: Results,
    out_dir: Path,
    ranges: pd.DataFrame | None,
    tables: dict[str, pd.DataFrame] | None = None,
) -> Exported:
    """tables: more Parquet tables (op_tables)."""
    trace = write_chrome_trace(chrome_trace(results, ranges), out_dir / TRACE_FILE)
    return Exported(trace, write_parquet(results, out_dir, tables), ranges is not None)


def op_tables(sources: list[Source], prefixed: bool = False) -> dict[str, pd.DataFrame]:
    """`kernels` (every kernel by total time) and `api` (the CUDA API summary) of the sources' runs
    that have a catalog, each row with its run_id (prefixed as in ranges_of) and rank."""
    kernel_frames, api_frames = [], []
    for s in sources:
        if s.catalog is None:
            continue
        for run_id in s.results.runs["run_id"]:
            name = f"{s.name}/{run_id}" if prefixed else run_id
            for rank, rank_run in {0: run_id, **rank_runs(s.catalog, run_id)}.items():
                every = top_kernels(s.catalog, rank_run, top=2**31 - 1)
                kernel_frames.append(every.drop(columns="rank").assign(run_id=name, rank=rank))
                api = cuda_api_summary(s.catalog, rank_run)
                api_frames.append(api.assign(run_id=name, rank=rank))
    tables = {"kernels": kernel_frames, "api": api_frames}
    return {k: pd.concat(v, ignore_index=True) for k, v in tables.items() if v}


def ranges_of(sources: list[Source], prefixed: bool = False) -> pd.DataFrame | None:
    """Every host range and step span of the sources' runs, from their catalogs, with the rank
    they ran on (a tensor-parallel run's workers as ranks 1, 2, ... of its run_id); None when any
    source has none (then the export falls back to results.json for all of them); with them every
    kernel, copy and CUDA API call (profiling.kernels.trace_ops). prefixed: run
    ids as runs.rundir.merge_results names them ("<source>/<run_id>")."""
    with_catalog = [(s, s.catalog) for s in sources if s.catalog is not None]
    if not sources or len(with_catalog) < len(sources):
        return None
    frames = []
    for s, catalog in with_catalog:
        for run_id in s.results.runs["run_id"]:
            name = f"{s.name}/{run_id}" if prefixed else run_id
            ranks = {0: run_id, **rank_runs(catalog, run_id)}
            for rank, rank_run in ranks.items():
                for rows in (trace_ranges(catalog, rank_run), trace_ops(catalog, rank_run)):
                    frames.append(rows.assign(run_id=name, rank=rank))
    return pd.concat(frames, ignore_index=True)
