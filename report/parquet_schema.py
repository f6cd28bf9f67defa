"""The Parquet tables' schemas, declared once: the same columns and types whether a table comes
from a run directory (results.json) or from a trace, so `pd.concat` of two exports keeps its types.

Types read well in pandas: counts are nullable integers (Int64: a trace may not know a run's
request count), times in ms floats, `started_at` a timestamp, text text. A runs table may carry
more columns than declared (what a sweep measured: clocks, timing flags); those follow the
declared ones with the types they have.
"""

from __future__ import annotations

import pandas as pd
import pyarrow as pa

from ..core.contract import STEP_TABLE

TEXT, FLOAT, INT, TIME, BOOL = pa.string(), pa.float64(), pa.int64(), pa.timestamp("us"), pa.bool_()

RUNS = pa.schema(
    [
        ("run_id", TEXT),
        ("config", TEXT),  # report.labels.run_name without the depth: rows of one configuration
        ("run_name", TEXT),  # runs.tables.config_names: as the console, report and Perfetto show it
        ("model", TEXT),
        ("preset", TEXT),
        ("depth", INT),
        ("streams", INT),
        ("output_len_mean", FLOAT),
        ("mean_generated_len", FLOAT),
        ("requests", INT),
        ("device", TEXT),
        ("driver", TEXT),
        ("torch", TEXT),
        ("nsys_version", TEXT),
        ("schema_version", TEXT),  # nsys's export schema ("3.20.3") or results.json's
        ("command", TEXT),
        ("started_at", TIME),
        ("wall_s", FLOAT),
        ("generated_tokens", INT),
        ("decode_steps", INT),
        ("source", TEXT),
        ("trace_path", TEXT),
        ("repeat", INT),
        ("profiled", BOOL),
        ("prompt_len", INT),
        ("constraint", TEXT),
        ("constrained_share", FLOAT),
        ("arrival_rate", FLOAT),  # Poisson arrivals a second; null: a closed loop
        ("max_num_seqs", INT),
        ("max_num_batched_tokens", INT),
        ("max_model_len", INT),
        ("tensor_parallel", INT),
        ("rank", INT),
    ]
)
_STEP_INTS = {"step", "depth", "batch_size", "gpu_start_ns", "gpu_end_ns"}
STEPS = pa.schema(
    [
        (c, TEXT if kind == "text" else INT if c in _STEP_INTS else FLOAT)
        for c, kind in STEP_TABLE.items()
    ]
)
GAPS = pa.schema([("run_id", TEXT), ("step", INT), ("gap_ms", FLOAT), ("began_in", TEXT)])
ATTRIBUTION = pa.schema(
    [
        ("run_id", TEXT),
        ("phase", TEXT),
        ("top_level", TEXT),
        ("time_ms", FLOAT),
        ("began_ms", FLOAT),
        ("time_share", FLOAT),
        ("began_share", FLOAT),
    ]
)
# A trace's kernels by total time and its CUDA API summary (profiling.kernels), one row per name.
KERNELS = pa.schema(
    [("run_id", TEXT), ("rank", INT), ("kernel", TEXT), ("name", TEXT), ("calls", INT)]
    + [(c, FLOAT) for c in ("total_ms", "mean_us", "p50_us", "p90_us", "p99_us", "max_us")]
    + [("busy_share", FLOAT)]
)
API = pa.schema(
    [("run_id", TEXT), ("rank", INT), ("name", TEXT), ("calls", INT)]
    + [(c, FLOAT) for c in ("total_ms", "mean_us", "p50_us", "p99_us", "max_us", "share")]
)
SCHEMAS = {
    "runs": RUNS,
    "steps": STEPS,
    "gaps": GAPS,
    "attribution": ATTRIBUTION,
    "kernels": KERNELS,
    "api": API,
}


def conform(frame: pd.DataFrame, schema: pa.Schema) -> pd.DataFrame:
    """frame with the schema's columns first, in its order and as its pandas types (a missing one
    all missing), then any others it has."""
    out = pd.DataFrame(index=frame.index)
    for f in schema:
        values = frame[f.name] if f.name in frame else pd.Series(None, index=frame.index)
        out[f.name] = _as(values, f.type)
    rest = [c for c in frame.columns if c not in schema.names]
    return pd.concat([out, frame[rest]], axis=1).reset_index(drop=True)


def _as(values: pd.Series, kind: pa.DataType) -> pd.Series:
    if kind == TEXT:
        return (
            values.astype(object)
            .where(values.notna(), None)
            .map(lambda v: v if v is None else str(v))
        )
    if kind == TIME:
        # Naive and zoned times alike as naive UTC: one type for every source.
        times = pd.to_datetime(values, errors="coerce", format="mixed", utc=True)
        return times.dt.tz_localize(None).astype("datetime64[us]")
    if kind == BOOL:
        return values.astype("boolean")
    numbers = pd.to_numeric(values, errors="coerce")
    # A trace's stream count is its median decode batch, which may fall between two counts.
    return numbers.round().astype("Int64") if kind == INT else numbers.astype("float64")
