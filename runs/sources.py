"""Where measured runs come from, opened one way: a run directory, a single nsys trace, or (nothing
given) the committed traces.

`open_source` gives the tables (`Results`) and, where one exists, the catalog they came from, so a
caller can ask profiling.analysis more (every host range of every step, the bubble split by time).
The notebooks, `bubblelab export` and the report's exports open their input here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import duckdb
import pandas as pd

from ..core.errors import BubblelabError
from ..core.steady import steady_state
from ..profiling.catalog import OFFLINE, connect
from ..profiling.ingest import ingest_trace
from .merge import merged_id
from .rundir import (
    RESULTS_FILE,
    TRACE_SUFFIXES,
    Results,
    is_results_file,
    no_results,
    read_results,
    results_path,
)
from .tables import collect, config_names
from .traces import index_meta, load_traces

CATALOG_FILE = "catalog.duckdb"  # what run-and-profile leaves beside results.json


@dataclass
class Source:
    results: Results
    catalog: duckdb.DuckDBPyConnection | None  # holds every run of `results`, or None
    name: str
    merged: bool = False  # shown beside other sources, its run ids prefixed (merge.merge_results)

    def page_id(self, run_id: str) -> str:
        """What a page of this source and any others beside it calls one of its runs (the catalog
        keeps calling it run_id)."""
        return merged_id(self.name, run_id) if self.merged else run_id


def open_source(path: Path | str | None = None) -> Source:
    """A run directory (DIR/results.json[.gz], with DIR/catalog.duckdb when the sweep left one), a
    results file (its tables alone, no catalog), an nsys export (.sqlite, .sqlite.gz or .nsys-rep,
    of bubblelab or of another engine, ingested into a catalog in memory), or None for the
    committed traces (traces/index.json)."""
    if path is None:
        con = connect(None)
        return Source(load_traces(catalog=con), con, "committed traces")
    path = Path(path)
    if path.is_dir():
        results = read_results(path)  # says what the folder is when it holds no results.json
        return Source(results, _catalog_holding(path / CATALOG_FILE, results), path.resolve().name)
    if is_results_file(path):  # NAME.results.json[.gz], as the committed measurements keep them
        name = path.name.removesuffix(".gz").removesuffix(RESULTS_FILE).removesuffix(".")
        return Source(read_results(path), None, name or path.resolve().parent.name)
    if path.is_file() and path.name.endswith(TRACE_SUFFIXES):
        con = connect(None)
        # One run per process and GPU: a trace of another engine may hold several.
        run_ids = ingest_trace(path, None, index_meta(path), con=con)
        results = collect(con, run_ids, provenance={"traces": {path.name: str(path)}})
        name = path.name.removesuffix(".gz").removesuffix(".sqlite").removesuffix(".nsys-rep")
        return Source(_bare_trace(results), con, name)
    if not path.exists():
        raise BubblelabError(f"{path} does not exist")
    raise BubblelabError(
        f"{path} is neither a run directory, a results file (NAME.results.json[.gz]) nor an nsys "
        "export (.sqlite, .sqlite.gz, .nsys-rep)"
    )


def run_catalog(run_dir: Path | str) -> duckdb.DuckDBPyConnection:
    """A run directory's catalog (DIR/catalog.duckdb), opened read-only: every run run-and-profile
    ingested, the ranks of a tensor-parallel run included, for profiling.analysis to answer from."""
    run_dir = Path(run_dir)
    if (run_dir / CATALOG_FILE).is_file():
        return connect(run_dir / CATALOG_FILE, read_only=True)
    if (run_dir / "runs").is_dir() or results_path(run_dir) is not None:
        raise BubblelabError(
            f"no {CATALOG_FILE} in {run_dir} (`bubblelab report {run_dir}` assembles a sweep's "
            "finished runs)"
        )
    raise no_results(run_dir)


def _bare_trace(results: Results) -> Results:
    """A trace ingested without metadata: its unknown counts as missing numbers, and its stream
    count read as each run's usual decode batch (the steady state's, which the stream count sets),
    said so in the provenance."""
    runs = results.runs
    for column in ("requests", "generated_tokens", "wall_s", "mean_generated_len"):
        runs[column] = pd.to_numeric(runs[column], errors="coerce").astype(float)
    missing = runs["streams"].isna()
    if missing.any():
        steady = steady_state(results.steps)
        batch = steady.groupby("run_id")["batch_size"].median()
        runs.loc[missing, "streams"] = runs.loc[missing, "run_id"].map(batch)
        results.provenance["streams"] = "the steady decode batch: the trace names no stream count"
    # what the console calls each run, for the page to name a run the trace gives no model
    runs["run_name"] = runs["run_id"].map(config_names(runs.to_dict("records")))
    return results


def _catalog_holding(path: Path, results: Results) -> duckdb.DuckDBPyConnection | None:
    """The sweep's catalog, if it is there and holds every run of results.json (a copied or trimmed
    run directory may have lost it)."""
    if not path.is_file():
        return None
    try:
        con = duckdb.connect(str(path), read_only=True, config=OFFLINE)
    except duckdb.Error:
        return None  # locked by a running sweep, or not a catalog: the tables alone will do
    try:
        known = set(con.execute("SELECT run_id FROM runs").df()["run_id"])
    except duckdb.Error:
        known = set()
    if not set(results.runs["run_id"]) <= known:
        con.close()
        return None
    return con
