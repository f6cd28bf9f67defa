"""`bubblelab export`: a run directory or a trace as a Chrome/Perfetto trace and Parquet tables.

    OUT/trace.json.gz     open in ui.perfetto.dev or chrome://tracing (report.perfetto)
    OUT/<table>.parquet   runs, steps, gaps, attribution; kernels, api (report.parquet)

The report writes the same files beside itself (REPORT_DIR/export/) and links them.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import contextmanager
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
# The steps a run's kernels, copies and CUDA calls are exported for (its middle ones; every step's
# host phases and spans are). A sweep's ~1.6M kernels are ~340 MB of JSON that ui.perfetto.dev
# opens slowly and ~24 MB gzipped; 128 steps show every pattern a step has.
OP_STEPS = 128


@dataclass
class Exported:
    trace: Path
    tables: list[Path]
    every_step: bool  # host ranges of every step (a catalog was at hand), or results.json's window
    op_steps: int | None = None  # ops of the middle op_steps steps of each run; None: every op


def export(
    source: Path | str | None, out_dir: Path | str, op_steps: int | None = OP_STEPS
) -> Exported:
    """Export a run directory, an nsys SQLite export, or (None) the committed traces into
    out_dir; op_steps: the steps a run's ops are exported for (None: all)."""
    opened = open_source(source)
    ranges = ranges_of([opened], op_steps=op_steps)
    return export_results(opened.results, Path(out_dir), ranges, op_tables([opened]), op_steps)


@contextmanager
def exporting_apart(run_dir: Path, out_dir: Path) -> Iterator[Future[Exported]]:
    """export(run_dir, out_dir) in a process of its own, while the caller draws the page: a sweep's
    export (every step's host phases, the ops of its middle steps) is as long as the rest of the
    report together. The process reads the run directory's catalog itself (read-only, as the
    caller does); it is started fresh (spawn), not forked from a process holding DuckDB threads.
    Leaving the block waits for it; its error, if any, is raised by the future's result()."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        yield pool.submit(export, run_dir, out_dir)


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
    op_steps: int | None = None,
) -> Exported:
    """tables: more Parquet tables (op_tables); op_steps: the window ranges_of cut the ops to."""
    if ranges is None:  # results.json's window of host ranges: no ops at all
        trace = write_chrome_trace(chrome_trace(results), out_dir / TRACE_FILE)
        return Exported(trace, write_parquet(results, out_dir, tables), every_step=False)
    ops = op_scope(op_steps)
    trace = write_chrome_trace(chrome_trace(results, ranges, ops), out_dir / TRACE_FILE)
    return Exported(trace, write_parquet(results, out_dir, tables), True, op_steps)


def op_scope(op_steps: int | None) -> str:
    """Which steps' kernels, copies and CUDA calls an export holds, in words (the trace, the
    report's link and the CLI say it alike)."""
    return f"the middle {op_steps} steps of each run" if op_steps else "every step"


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


def ranges_of(
    sources: list[Source], prefixed: bool = False, op_steps: int | None = OP_STEPS
) -> pd.DataFrame | None:
    """Every host range and step span of the sources' runs, from their catalogs, with the rank
    they ran on (a tensor-parallel run's workers as ranks 1, 2, ... of its run_id); None when any
    source has none (then the export falls back to results.json for all of them); with them the
    kernels, copies and CUDA API calls (profiling.kernels.trace_ops) of the middle op_steps steps of
    each run (None: of all). prefixed: run ids as runs.merge.merge_results names them
    ("<source>/<run_id>")."""
    with_catalog = [(s, s.catalog) for s in sources if s.catalog is not None]
    if not sources or len(with_catalog) < len(sources):
        return None
    frames = []
    for s, catalog in with_catalog:
        for run_id in s.results.runs["run_id"]:
            name = f"{s.name}/{run_id}" if prefixed else run_id
            ranks = {0: run_id, **rank_runs(catalog, run_id)}
            steps = s.results.steps.loc[s.results.steps["run_id"] == run_id, "step"]
            window = op_window(steps, op_steps)
            for rank, rank_run in ranks.items():
                ops = trace_ops(catalog, rank_run, window)
                for rows in (trace_ranges(catalog, rank_run), ops):
                    frames.append(rows.assign(run_id=name, rank=rank))
    return pd.concat(frames, ignore_index=True)


def op_window(steps: pd.Series, op_steps: int | None) -> tuple[int, int] | None:
    """(first, last) step number of the middle op_steps steps; None (every op) when op_steps is
    None or the run has no more steps than that."""
    ordered = sorted(set(int(s) for s in steps.dropna()))
    if op_steps is None or len(ordered) <= op_steps:
        return None
    start = (len(ordered) - op_steps) // 2
    return ordered[start], ordered[start + op_steps - 1]
