"""The run directory's `results.json`: everything the report and `predict` read, in one JSON file.

Layout of a run directory (written by run-and-profile, read by `bubblelab report DIR`):

    DIR/results.json.gz   tables + provenance (this module), gzipped JSON; a plain
                          DIR/results.json (older sweeps) is read as well, and so is a results file
                          by itself (NAME.results.json[.gz])
    DIR/runs/<pass>/      each run's record (bubblelab.runs.record) and the pass's own files
    DIR/traces/           the nsys pass's SQLite exports, gzipped (referenced from runs.trace_path)
    DIR/catalog.duckdb    every run ingested (bubblelab.runs.assemble), what `analyze DIR` reads
    DIR/report.html       written by bubblelab.report.report.report_run_dir, with DIR/export/
                          (the trace and Parquet tables of bubblelab.report.export)

results.json holds {"schema_version": 3, "runs": [...], "steps": [...], "attribution": [...],
"gaps": [...], "timeline": [...], "requests": [...], "ranks": [...], "rank_attribution": [...],
"provenance": {...}}, each table a list of records:

- runs: the "Run metadata" columns of docs/phases.md, one record per run, and schema 2's columns
  (bubblelab.runs.schema); a sweep adds what the worker measured on a GPU (sm_clock_mhz, power_w,
  clock_anchor_us_max), what each run's timed region met (runs.assemble.TIMING_COLUMNS: compiles,
  graph captures, new shapes, garbage collections, allocator growth, the slowest step, the host
  share; timing_flags says why a run's wall is suspect, empty when nothing is), and merge_results
  the run's run_dir. Optional columns: a document without them reads them as missing.
- requests: run_id, request, prompt_len, output_len, max_tokens, constrained, arrival_s: what each
  run was asked (in the order sent), when it could be sent (0 in a closed loop) and what it
  produced; the cost model replays the schedule from it. An older arrival sweep's lack arrival_s: it
  is regenerated from the sweep's seed (runs.schema.with_arrivals).
- steps: the per-step table of docs/phases.md, all runs together (run_id tells them apart).
- attribution: run_id, phase, top_level, and the bubble of the run's steady steps split by host
  phase two ways (profiling.analysis.attribution): time_ms, the idle time during which `phase` was
  the innermost host range running (where the bubble's time went: the headline), and began_ms, the
  idle time of the gaps that began while it was; time_share and began_share of the total.
- gaps: run_id, step, gap_ms: one record per GPU idle gap.
- timeline (optional): run_id, lane ("host" | "gpu"), phase, step, start_ns, end_ns: the raw ranges
  of engine.timeline.Timeline (host_frame / device_frame), for the lane chart.
- ranks (optional; tensor-parallel runs only): every rank's per-step table with the step's spans
  and host phases in time, compute and communication (profiling/sql/tp_rank_steps.sql), `run_id`
  naming the run (rank 0's), `rank` the rank; profiling.ranks.summary reads the cross-rank view
  from it. rank_attribution: run_id, rank, phase, top_level, time_ms, began_ms over rank 0's steady
  steps.
- provenance: free-form JSON object; a sweep writes sweep, command, timings, catalog and machine
  (git revision, CPU, GPUs: runs.machine), which the report shows once; other keys are shown as
  JSON.

Older documents are read as the current schema (bubblelab.runs.schema.migrate): schema 2 kept one
split of the bubble, so the other reads as missing.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ..core.contract import NUMBER, REQUIRED_STEP_COLUMNS, STEP_TABLE, TEXT
from ..core.errors import BubblelabError
from ..core.files import write_atomic

RESULTS_FILE = "results.json"  # the document's name; a sweep writes it gzipped (WRITTEN_FILE)
WRITTEN_FILE = RESULTS_FILE + ".gz"  # ~10x smaller: a sweep's steps and gaps are ~25 MB as JSON
TRACE_SUFFIXES = (".sqlite", ".sqlite.gz", ".nsys-rep")  # an nsys trace, not a run directory
SCHEMA_VERSION = 3
TABLES = (
    "runs",
    "steps",
    "attribution",
    "gaps",
    "timeline",
    "requests",
    "ranks",
    "rank_attribution",
)
# docs/phases.md: "Run metadata" (the per-step table is core.contract's).
RUN_COLUMNS = (
    "run_id, model, preset, depth, streams, output_len_mean, mean_generated_len, requests, device, "
    "driver, torch, nsys_version, schema_version, command, started_at, wall_s, generated_tokens, "
    "decode_steps, source, trace_path"
).split(", ")
# The columns readers compute with, by kind: checked on reading so that a damaged or hand-edited
# file fails in one line here, not with a TypeError deep in the report.
RUN_NUMBERS = "depth streams mean_generated_len wall_s generated_tokens requests decode_steps"
# What profiling.ranks.summary and the cost model read of the `ranks` table (tp_rank_steps.sql).
RANK_NUMBERS = (
    "rank step batch_size forward_ms sampling_ms bubble_ms period_ms busy_ms launch_ms "
    "finalize_ms handoff_ms recv_ms compute_ms comm_ms comm_exposed_ms forward_start forward_end "
    "sampling_start sampling_end launch_start launch_end finalize_start finalize_end"
)
TYPED_COLUMNS = {
    "runs": {
        **dict.fromkeys(("run_id", "model", "preset", "device"), TEXT),
        **dict.fromkeys((*RUN_NUMBERS.split(), "output_len_mean"), NUMBER),
    },
    "steps": STEP_TABLE,
    "attribution": {"run_id": TEXT, "phase": TEXT, "time_ms": NUMBER, "began_ms": NUMBER},
    "gaps": {"run_id": TEXT, "step": NUMBER, "gap_ms": NUMBER, "began_in": TEXT},
    "timeline": {
        **dict.fromkeys(("run_id", "lane", "phase"), TEXT),
        **dict.fromkeys(("step", "start_ns", "end_ns"), NUMBER),
    },
    "ranks": {
        **dict.fromkeys(("run_id", "rank_run_id", "kind"), TEXT),
        **dict.fromkeys(RANK_NUMBERS.split(), NUMBER),
    },
    "rank_attribution": {
        **dict.fromkeys(("run_id", "phase"), TEXT),
        **dict.fromkeys(("rank", "time_ms", "began_ms"), NUMBER),
    },
}
MAX_RESULTS_BYTES = 256 << 20  # an H200 sweep's results.json is 8 MiB; refuse absurd ones
NEEDED_RUN_COLUMNS = (
    "run_id",
    "depth",
    "streams",
    "device",
    "mean_generated_len",
    "wall_s",
    "generated_tokens",
)


@dataclass
class Results:
    runs: pd.DataFrame
    steps: pd.DataFrame
    attribution: pd.DataFrame = field(default_factory=pd.DataFrame)
    gaps: pd.DataFrame = field(default_factory=pd.DataFrame)
    timeline: pd.DataFrame = field(default_factory=pd.DataFrame)
    provenance: dict = field(default_factory=dict)
    requests: pd.DataFrame = field(default_factory=pd.DataFrame)
    ranks: pd.DataFrame = field(default_factory=pd.DataFrame)  # tensor parallel: every rank's steps
    rank_attribution: pd.DataFrame = field(default_factory=pd.DataFrame)


def _records(df: pd.DataFrame | None) -> list[dict]:
    # pandas' own JSON writer turns NaN into null and numpy scalars into plain numbers.
    return (
        []
        if df is None or df.empty
        else json.loads(df.to_json(orient="records", date_format="iso"))
    )


def write_results(
    run_dir: Path | str,
    runs_df: pd.DataFrame,
    steps_df: pd.DataFrame,
    attribution_df: pd.DataFrame | None = None,
    gaps_df: pd.DataFrame | None = None,
    provenance: dict | None = None,
    timeline_df: pd.DataFrame | None = None,
    requests_df: pd.DataFrame | None = None,
    ranks_df: pd.DataFrame | None = None,
    rank_attribution_df: pd.DataFrame | None = None,
) -> Path:
    run_dir = Path(run_dir)
    doc: dict[str, Any] = {"schema_version": SCHEMA_VERSION}
    tables = (
        runs_df, steps_df, attribution_df, gaps_df, timeline_df, requests_df, ranks_df,
        rank_attribution_df,
    )  # fmt: skip
    for name, df in zip(TABLES, tables, strict=True):
        doc[name] = _records(df)
    doc["provenance"] = provenance or {}
    text = json.dumps(doc, separators=(",", ":"), default=str)
    path = write_atomic(run_dir / WRITTEN_FILE, gzip.compress(text.encode(), 1, mtime=0))
    (run_dir / RESULTS_FILE).unlink(missing_ok=True)  # an older plain one would be read first
    return path


def is_results_file(path: Path | str) -> bool:
    """A results document named as such: results.json[.gz] or <name>.results.json[.gz] (how the
    committed measurements keep several sweeps in one folder)."""
    name = Path(path).name
    return Path(path).is_file() and name.removesuffix(".gz").endswith(RESULTS_FILE)


def results_path(run_dir: Path | str) -> Path | None:
    """DIR/results.json (as sweeps wrote it before, or a user unpacked it), else
    DIR/results.json.gz (what write_results writes), or the results file itself; None if none."""
    if is_results_file(run_dir):
        return Path(run_dir)
    plain = Path(run_dir) / RESULTS_FILE
    return next((p for p in (plain, plain.with_name(RESULTS_FILE + ".gz")) if p.is_file()), None)


def no_results(run_dir: Path) -> BubblelabError:
    """What to say of a directory with no results.json: a folder of traces is named as one."""
    found = run_dir.iterdir() if run_dir.is_dir() else ()
    traces = sorted(p for p in found if p.name.endswith(TRACE_SUFFIXES))
    if not traces:
        return BubblelabError(
            f"no {RESULTS_FILE} in {run_dir} (run `bubblelab run-and-profile` first)"
        )
    them = (
        f"{len(traces)} traces: name them (e.g. {traces[0]})"
        if traces[1:]
        else f"one trace: name it ({traces[0]})"
    )
    return BubblelabError(f"{run_dir} is not a run directory (no {RESULTS_FILE}); it holds {them}")


def read_results(run_dir: Path | str) -> Results:
    """DIR/results.json as tables. Anything that is not a results document written by
    write_results (damaged, truncated, another schema, wrong types) is one BubblelabError."""
    path = results_path(run_dir)
    if path is None:
        raise no_results(Path(run_dir))
    doc = load_document(path)
    if not isinstance(doc, dict):
        raise BubblelabError(f"{path} is not a results document (a JSON object)")
    if doc.get("schema_version") in (1, 2):
        from .schema import migrate  # imports the workload and the cost model: only if needed

        try:
            doc = migrate(doc)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            version = doc.get("schema_version")
            raise BubblelabError(
                f"{path}: a schema-{version} document that cannot be read ({e})"
            ) from None
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise BubblelabError(
            f"{path} has schema_version {doc.get('schema_version')!r}, expected {SCHEMA_VERSION}"
        )
    tables = {}
    for name in TABLES:
        records = doc.get(name) or []
        if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
            raise BubblelabError(f"{path}: {name} is not a list of records")
        tables[name] = pd.DataFrame.from_records(records)
    requests = tables.pop("requests")
    runs, steps, ranks = tables["runs"], tables["steps"], tables["ranks"]
    if runs.empty or steps.empty:
        raise BubblelabError(f"{path} has no runs or no steps")
    needs = [("runs", runs, NEEDED_RUN_COLUMNS), ("steps", steps, REQUIRED_STEP_COLUMNS)]
    if len(ranks):
        needs.append(("ranks", ranks, ("run_id", "kind", *RANK_NUMBERS.split())))
    for name, table, needed in needs:
        if missing := [c for c in needed if c not in table]:
            raise BubblelabError(
                f"{path}: {name} lack the column(s) {', '.join(missing)} (see docs/phases.md)"
            )
    for name, table in tables.items():
        for column, kind in TYPED_COLUMNS.get(name, {}).items():
            if column in table:
                table[column] = _typed(path, name, column, table[column], kind)
    provenance = doc.get("provenance") or {}
    if not isinstance(provenance, dict):
        raise BubblelabError(f"{path}: provenance is not a JSON object")
    # Optional metadata may be absent; keep the contract's columns so readers need not check each
    # one.
    tables["runs"] = runs.reindex(
        columns=[*RUN_COLUMNS, *(c for c in runs if c not in RUN_COLUMNS)]
    )
    sweep = provenance.get("sweep") or {}
    if len(requests) and "arrival_s" not in requests and sweep.get("arrival_rate"):
        from .schema import with_arrivals  # imports the workload: only for older arrival sweeps

        requests = with_arrivals(requests, tables["runs"], sweep)
    return Results(**tables, provenance=provenance, requests=requests)


def load_document(path: Path) -> Any:
    """A results file's JSON as it is (plain or gzipped, at most MAX_RESULTS_BYTES), unchecked;
    one BubblelabError when it cannot be read."""
    try:
        if path.suffix == ".gz":
            with gzip.open(path) as f:  # read at most the limit: a gzip bomb stays small
                data = f.read(MAX_RESULTS_BYTES + 1)
        else:
            with path.open("rb") as f:
                data = f.read(MAX_RESULTS_BYTES + 1)
        if len(data) > MAX_RESULTS_BYTES:
            raise BubblelabError(f"{path} is larger than {MAX_RESULTS_BYTES >> 20} MiB")
        return json.loads(data.decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, OSError, EOFError, RecursionError) as e:
        raise BubblelabError(f"{path} is not valid (gzipped) JSON: {_one_line(e)}") from None


def _typed(path: Path, table: str, column: str, values: pd.Series, kind: str) -> pd.Series:
    """A column as its readers use it: text (run ids never missing), or numbers (missing: NaN)."""
    if kind == TEXT:
        missing = values.map(lambda v: v is None or (isinstance(v, float) and v != v))
        text = values.map(lambda v: isinstance(v, str)) | (missing & (column != "run_id"))
        if not text.all():
            raise BubblelabError(f"{path}: {table}.{column} holds values that are not text")
        return values
    numbers = pd.to_numeric(values, errors="coerce")
    if numbers.isna().gt(values.isna()).any() or values.map(lambda v: isinstance(v, bool)).any():
        raise BubblelabError(f"{path}: {table}.{column} holds values that are not numbers")
    return numbers


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())[:200]


def load_runs(source: Path | str) -> Results:
    """Runs and steps from a run directory (results.json), a results file ([name.]results.json[.gz])
    or a DuckDB catalog with `runs` and `steps` tables."""
    source = Path(source)
    if not source.exists():
        raise BubblelabError(f"{source} does not exist")
    if source.is_dir() or is_results_file(source):
        return read_results(source)
    if source.suffix in (".duckdb", ".db") and source.is_file():
        import duckdb  # only needed for catalogs

        from ..profiling.catalog import OFFLINE

        try:
            with duckdb.connect(str(source), read_only=True, config=OFFLINE) as con:
                runs, steps = con.sql("FROM runs").df(), con.sql("FROM steps").df()
        except duckdb.CatalogException:
            raise BubblelabError(f"catalog {source} lacks the runs/steps tables") from None
        except duckdb.Error as e:
            raise BubblelabError(
                f"cannot read catalog {source}: {str(e).splitlines()[0]}"
            ) from None
        if runs.empty or steps.empty:
            raise BubblelabError(f"catalog {source} has no runs or no steps")
        return Results(runs, steps)
    trace = source.name.endswith(TRACE_SUFFIXES)
    raise BubblelabError(
        f"{source} is neither a run directory, a results file nor a DuckDB catalog"
        + (
            "; a trace is read by `bubblelab analyze` (which forecasts pipelining from another "
            "engine's trace) and `bubblelab report`"
            if trace
            else ""
        )
    )
