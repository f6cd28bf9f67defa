"""Committed nsys traces (traces/*.sqlite.gz, described by traces/index.json) as one `Results`.

The notebooks read the traces through this; the tables come from runs.tables.collect, like a
sweep's.
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pandas as pd

from ..core.errors import BubblelabError
from ..costmodel.configs import CONFIG_KEYS
from ..costmodel.perturbation import steady_medians
from ..profiling.catalog import connect
from ..profiling.ingest import META_KEYS, ingest
from ..profiling.steps import StepOptions
from .rundir import Results, read_results, results_path
from .tables import collect

TRACES_DIR = Path(__file__).resolve().parents[1] / "traces"  # the checkout's traces/ folder


def index_meta(trace: Path | str) -> dict:
    """What an index.json beside a trace says of it (the committed traces' model, depth, streams,
    ...) as run metadata for profiling.ingest; else, for a trace a sweep left in its run
    directory's traces/, what its results say of the run it traced (sweep_meta); {} where neither
    does."""
    trace = Path(trace)
    try:
        entry = json.loads((trace.parent / "index.json").read_text()).get(trace.name)
    except (OSError, ValueError, AttributeError):  # no index, not JSON, not an object
        return sweep_meta(trace)
    return {k: v for k, v in entry.items() if k in META_KEYS} if isinstance(entry, dict) else {}


def _sweep_run(trace: Path) -> tuple[Results, pd.Series] | None:
    """The sweep's results and the row of the run its nsys pass traced into
    RUN_DIR/traces/run.<n>.sqlite[.gz] (the one row whose trace_path names the same file); None
    for any other trace, or where the results name no such run or several."""
    if trace.parent.name != "traces" or results_path(trace.parent.parent) is None:
        return None
    try:
        results = read_results(trace.parent.parent)
    except BubblelabError:
        return None
    runs = results.runs
    if "trace_path" not in runs:
        return None
    stem = trace.name.removesuffix(".gz").removesuffix(".sqlite")
    mine = runs[
        [isinstance(p, str) and Path(p).name.startswith(f"{stem}.") for p in runs["trace_path"]]
    ]
    return (results, mine.iloc[0]) if len(mine) == 1 else None


def sweep_meta(trace: Path) -> dict:
    """The run a sweep's nsys pass traced (_sweep_run) as run metadata; {} where there is none."""
    found = _sweep_run(trace)
    if found is None:
        return {}
    # numpy scalars as Python's, for DuckDB parameters; a missing value is no metadata
    return {
        k: v.item() if hasattr(v, "item") else v
        for k, v in found[1].items()
        if k in META_KEYS and not pd.isna(v)
    }


def _sweep_unprofiled_period_ms(trace: Path) -> float | None:
    """The steady period of the sweep's unprofiled runs of the traced run's configuration and
    depth, pooled as profiler_perturbation pools them (what tools.docs.make_traces writes into a
    committed trace's index.json); None where the sweep ran none."""
    found = _sweep_run(trace)
    if found is None:
        return None
    results, traced = found
    runs = results.runs
    if "profiled" not in runs:
        return None
    keys = [k for k in (*CONFIG_KEYS, "depth") if k in runs and k != "profiled"]
    same = (runs[keys] == traced[keys]) | (runs[keys].isna() & traced[keys].isna())
    plain = runs[same.all(axis=1) & ~runs["profiled"].astype(bool)]
    if plain.empty:
        return None
    period = steady_medians(results.steps[results.steps["run_id"].isin(plain["run_id"])])
    return period.get("period_ms")


def unprofiled_period_ms(trace: Path | str) -> float | None:
    """The steady period of the trace's configuration without nsys: where its index.json says
    (`nsys_inflation.unprofiled_ms`: its sweep's unprofiled repeats, tools.docs.make_traces), else
    for a trace a sweep left in its run directory, from that sweep's unprofiled runs."""
    trace = Path(trace)
    try:
        entry = json.loads((trace.parent / "index.json").read_text()).get(trace.name) or {}
        period = entry["nsys_inflation"]["unprofiled_ms"]["period"]
    except OSError:
        period = _sweep_unprofiled_period_ms(trace)
    except (ValueError, AttributeError, KeyError, TypeError):
        return None
    return float(period) if isinstance(period, int | float) and period > 0 else None


def load_traces(
    names: list[str] | None = None,
    traces_dir: Path | str = TRACES_DIR,
    catalog: Path | str | duckdb.DuckDBPyConnection | None = None,
) -> Results:
    """Ingest the indexed traces (all of index.json by default) and collect runs, steps,
    attribution, gaps and a lane window per run. catalog: a DuckDB file to keep (re-ingesting a
    trace adds nothing), or an open catalog connection to ask profiling.analysis more questions
    afterwards; default in memory. A trace of another engine may name how to find its steps:
    "step_range" (a regex) or "step_rule"."""
    traces_dir = Path(traces_dir)
    index_path = traces_dir / "index.json"
    if not index_path.is_file():
        raise BubblelabError(f"no index.json in {traces_dir}")
    index = json.loads(index_path.read_text())
    if unknown := sorted(set(names or ()) - set(index)):
        raise BubblelabError(f"not in {index_path}: {', '.join(unknown)}")
    con = catalog if isinstance(catalog, duckdb.DuckDBPyConnection) else connect(catalog)
    run_ids = [
        ingest(
            traces_dir / name,
            None,
            {k: v for k, v in index[name].items() if k in META_KEYS},
            steps=StepOptions(index[name].get("step_range"), index[name].get("step_rule", "auto")),
            con=con,
        )
        for name in names or index
    ]
    return collect(
        con,
        run_ids,
        provenance={"traces": {name: str(traces_dir / name) for name in names or index}},
    )
