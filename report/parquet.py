"""Runs as Parquet tables: runs, steps, idle gaps and bubble attribution, one file each, for pandas,
polars, DuckDB or Spark; from a trace's catalog also kernels (every kernel's count, total and
percentiles: profiling.kernels.top_kernels) and api (the CUDA API summary).

Columns are those of results.json (docs/phases.md; runs.rundir), attribution's two splits of the
bubble (time_ms, began_ms) among them, with the columns and types of report.parquet_schema
whatever the source: every table carries run_id, and runs.parquet adds each run's configuration
label, so the tables join without bubblelab. The provenance travels as JSON in
runs.parquet's schema metadata (key `bubblelab.provenance`).
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from ..core.files import write_atomic
from ..runs.rundir import Results
from .labels import run_name, run_names
from .parquet_schema import SCHEMAS, conform

TABLES = ("runs", "steps", "gaps", "attribution")


def write_parquet(
    results: Results, out_dir: Path, extra: dict[str, pd.DataFrame] | None = None
) -> list[Path]:
    """OUT_DIR/<table>.parquet for each table that has rows, results' and extra's (name ->
    table); returns the paths written. A table of ours this source has no rows for is removed
    if an earlier export left it there: its runs are not these, and a glob would join them."""
    paths = []
    tables = [(name, getattr(results, name)) for name in TABLES] + list((extra or {}).items())
    for name, frame in tables:
        if frame.empty:
            continue
        metadata = None
        if name == "runs":
            frame = frame.assign(
                config=frame.apply(run_name, axis=1, depth=False),
                run_name=frame["run_id"].map(run_names(frame)),
            )
            metadata = {"bubblelab.provenance": json.dumps(results.provenance, default=str)}
        frame = _arrow_ready(conform(frame, SCHEMAS[name]))
        schema = pa.Table.from_pandas(frame, preserve_index=False).schema  # the extra columns'
        for i, declared in enumerate(SCHEMAS[name]):
            schema = schema.set(i, declared)
        table = pa.Table.from_pandas(frame, schema=schema, preserve_index=False)
        if metadata:
            table = table.replace_schema_metadata({**(table.schema.metadata or {}), **metadata})
        path = out_dir / f"{name}.parquet"
        paths.append(write_atomic(path, functools.partial(_write_table, table)))
    for name in SCHEMAS:
        stale = out_dir / f"{name}.parquet"
        if stale not in paths and stale.is_file():
            stale.unlink()
    return paths


def _write_table(table: pa.Table, path: Path) -> None:
    pq.write_table(table, path, compression="zstd")


def _arrow_ready(frame: pd.DataFrame) -> pd.DataFrame:
    """Object columns holding more than one kind of value (a run's schema_version is a number from
    one source, text from another) become text; missing values stay missing."""
    out = frame.copy()
    for column in [c for c in out.columns if out[c].dtype == object]:
        values = out[column].dropna()
        if values.map(type).nunique() > 1:
            out[column] = out[column].map(lambda v: None if _missing(v) else str(v))
    return out


def _missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))
