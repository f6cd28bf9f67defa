"""Ingest an nsys SQLite export (checked by trace_check) or an in-process Timeline into the catalog.

A run is one process on one GPU: a trace of several (a tensor-parallel engine) becomes one run each,
never a merged table; in a trace of bubblelab's own ranges each is given its tensor-parallel rank
(sql/tp_assign_ranks.sql), so profiling.ranks can put the ranks of a step side by side. Runs are
keyed by the sha256 of the trace's content (and the process and GPU, when it holds several), so
ingesting the same trace twice returns the same run_ids and adds nothing.
Everything a run adds happens in one transaction: an interrupted ingest leaves no half run.

Steps: a trace with bubblelab's own ranges is read by docs/phases.md (per_step.sql); any other trace
is a foreign run whose steps profiling/steps.py finds (a --step-range, one CUDA-graph replay a step,
or the host sync that closes each step) and whose per-step table foreign_per_step.sql builds.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb
import pandas as pd

from ..core.contract import DOMAIN
from ..core.errors import BubblelabError
from ..core.steady import PREFILL_RATIO
from ..core.timeline import Timeline
from . import queries
from .catalog import (
    RUN_COLUMNS,
    connect,
    load_sqlite_extension,
    one_row,
    sql_string,
)
from .nsys import export_sqlite
from .steps import StepOptions, find_steps
from .trace_check import (
    Part,
    TraceFacts,
    capture_range,
    check_values,
    gpu_parts,
    inspect_trace,
)

# (nsys table, ingestion statement); tables are created lazily, so a missing one means "no such
# events".
OPTIONAL_TABLES = (
    ("CUPTI_ACTIVITY_KIND_KERNEL", "ingest_kernels"),
    ("CUPTI_ACTIVITY_KIND_GRAPH_TRACE", "ingest_graphs"),  # replays traced whole: one op each
    ("CUPTI_ACTIVITY_KIND_MEMCPY", "ingest_memcpys"),
    ("CUPTI_ACTIVITY_KIND_MEMSET", "ingest_memsets"),
    ("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "ingest_syncs"),
)
META_KEYS = frozenset(RUN_COLUMNS) - {
    "run_id",
    "source",
    "trace_path",
    "schema_version",
}  # given values win


def ingest(
    trace: Path,
    catalog: Path | str | None,
    meta: dict | None = None,
    *,
    domain: str = DOMAIN,
    steps: StepOptions | None = None,
    con: duckdb.DuckDBPyConnection | None = None,
) -> str:
    """Add an nsys export (.sqlite, .sqlite.gz or .nsys-rep) of one process on one GPU to the
    catalog; returns its run_id (the same on re-ingest). A trace of several: a one-line error naming
    them (ingest_trace takes each as a run of its own)."""
    return _ingest(trace, catalog, meta, domain, steps or StepOptions(), con, single=True)[0]


def ingest_trace(
    trace: Path,
    catalog: Path | str | None,
    meta: dict | None = None,
    *,
    domain: str = DOMAIN,
    steps: StepOptions | None = None,
    con: duckdb.DuckDBPyConnection | None = None,
) -> list[str]:
    """Add an nsys export to the catalog as one run per process and GPU that ran GPU work (most work
    first); returns their run_ids."""
    return _ingest(trace, catalog, meta, domain, steps or StepOptions(), con, single=False)


def _ingest(
    trace: Path,
    catalog: Path | str | None,
    meta: dict | None,
    domain: str,
    options: StepOptions,
    con: duckdb.DuckDBPyConnection | None,
    single: bool,
) -> list[str]:
    trace = Path(trace)
    meta = _checked_meta(meta)
    with plain_sqlite(trace) as plain:
        facts = inspect_trace(plain, domain)
        ours = facts.has_domain and options.step_range is None and options.rule == "auto"
        con = con or connect(catalog)
        load_sqlite_extension(con)
        run_ids = []
        try:
            con.execute(f"ATTACH {sql_string(str(plain))} AS ns (TYPE sqlite, READ_ONLY)")
            parts = gpu_parts(con, trace, facts.tables)
            if single and len(parts) > 1:
                raise BubblelabError(
                    f"{trace}: GPU work of {len(parts)} processes or GPUs "
                    f"({'; '.join(map(str, parts))}): one run each, use ingest_trace"
                )
            capture = capture_range(con, facts.tables)
            labels = domain if ours else None
            for part in parts:
                named = part if len(parts) > 1 else None  # a part names its run among several
                run_ids.append(
                    _ingest_part(con, trace, facts, named, meta, labels, options, capture)
                )
            if ours and len(run_ids) > 1:  # a tensor-parallel engine: one process per rank
                with _transaction(con):
                    queries.execute(con, "tp_assign_ranks", {"run_ids": run_ids})
        except (duckdb.Error, UnicodeDecodeError) as e:  # text that is not UTF-8 is damage too
            raise BubblelabError(
                f"{trace}: cannot read the trace ({str(e).splitlines()[0]})"
            ) from None
        finally:
            con.execute("DETACH DATABASE IF EXISTS ns")
    return run_ids


def _ingest_part(
    con: duckdb.DuckDBPyConnection,
    trace: Path,
    facts: TraceFacts,
    part: Part | None,
    meta: dict,
    domain: str | None,
    options: StepOptions,
    capture: tuple[float, float],
) -> str:
    """One process on one GPU as a run: by our ranges (domain given) or as a foreign run. The run's
    key is the trace's sha256, plus, for a foreign run, how its steps were found (the same trace
    read by another rule is another run), plus the process and GPU when the trace holds several
    (`part`; None: the trace's only one)."""
    content_hash = facts.content_hash
    if domain is None:
        content_hash += f"|steps:{json.dumps(options.__dict__, sort_keys=True)}"
    base = (
        content_hash[:16]
        if domain is not None
        else hashlib.sha256(content_hash.encode()).hexdigest()[:16]
    )
    if part is not None:
        content_hash += f"|part:{part.pid}:{part.device}"
    known = _known_run(con, content_hash)
    if known:
        return known
    run_id = base + (f"-p{(part.pid >> 24) & 0xFFFFFF}-g{part.device}" if part else "")
    pid, device = (part.pid, part.device) if part else (None, None)
    params = {"run_id": run_id, "pid": pid, "device": device}
    with _transaction(con):
        _insert_run(
            con,
            run_id,
            content_hash,
            {**facts.run, **meta, "source": "nsys", "trace_path": str(trace.resolve())},
        )
        con.executemany(
            "INSERT INTO trace_meta VALUES (?, ?, ?)",
            [(run_id, k, v) for k, v in facts.export_meta.items()],
        )
        if "NVTX_EVENTS" in facts.tables:
            queries.execute(con, "ingest_host_ranges", {**params, "domain": domain})
        if domain is not None:  # a foreign run's ranges are read lazily (host_activity.sql)
            queries.execute(con, "ingest_step_info", {**params, "domain": domain})
            queries.execute(con, "host_segments", {"run_id": run_id})
        if "CUPTI_ACTIVITY_KIND_RUNTIME" in facts.tables:
            queries.execute(con, "ingest_api_calls", {**params, "labelled": domain is not None})
        if "OSRT_API" in facts.tables:
            queries.execute(con, "ingest_os_calls", params)
        for table, statement in OPTIONAL_TABLES:
            if table in facts.tables:
                queries.execute(con, statement, params)
        what = f"{trace} ({part})" if part else str(trace)
        check_values(con, run_id, capture, what)
        if domain is not None:
            con.execute(
                "INSERT INTO step_rules VALUES (?, 'bubblelab', ?, ?, ?, NULL, NULL)",
                [run_id, f"NVTX ranges of domain {domain}", pid, device],
            )
            _derive_ours(con, run_id)
        else:
            find_steps(con, run_id, (pid, device), options, what)
            _derive_foreign(con, run_id, options)
    return run_id


def _derive_ours(con: duckdb.DuckDBPyConnection, run_id: str) -> None:
    params = {"run_id": run_id}
    queries.execute(con, "gpu_busy", params)
    queries.execute(con, "step_spans", params)
    queries.execute(con, "run_defaults", params)
    queries.insert(con, "steps", "per_step", params)


def _derive_foreign(con: duckdb.DuckDBPyConnection, run_id: str, options: StepOptions) -> None:
    params = {"run_id": run_id}
    queries.execute(con, "gpu_busy", params)
    queries.insert(
        con,
        "steps",
        "foreign_per_step",
        {**params, "gap_ns": options.gap_ns, "prefill_ratio": PREFILL_RATIO},
    )
    queries.execute(con, "run_defaults", params)
    queries.execute(con, "foreign_gaps", params)
    queries.execute(con, "foreign_sync_inventory", params)
    tid = one_row(con, "SELECT engine_tid FROM step_rules WHERE run_id = ?", [run_id])[0]
    intervals = queries.relation(con, "activity_intervals", {**params, "gap_ns": options.gap_ns})
    con.register("intervals", intervals)
    try:
        queries.execute(con, "host_activity", {**params, "tid": tid})
    finally:
        con.unregister("intervals")


def ingest_timeline(
    timeline: Timeline,
    con: duckdb.DuckDBPyConnection,
    meta: dict | None = None,
    run_id: str | None = None,
) -> str:
    """Store an in-process Timeline as a run (source 'timeline') in the same tables an nsys run
    fills."""
    meta = _checked_meta(meta)
    host, device, steps = timeline.host_frame(), timeline.device_frame(), timeline.steps_frame()
    digest = hashlib.sha256()
    for frame in (host, device, steps):
        digest.update(pd.util.hash_pandas_object(frame, index=False).values.tobytes())
    content_hash = digest.hexdigest()
    known = _known_run(con, content_hash)
    if known:
        return known
    run_id = run_id or content_hash[:16]
    if con.execute("SELECT 1 FROM runs WHERE run_id = ?", [run_id]).fetchone():
        raise BubblelabError(f"the catalog already holds a different run named {run_id}")
    depth = meta.get("depth", timeline.depth)
    host = host.assign(run_id=run_id, range_id=range(1, len(host) + 1), tid=0)
    steps = steps.assign(run_id=run_id, depth=depth)
    device = device.assign(run_id=run_id)
    try:
        con.register("tl_host", host)
        con.register("tl_steps", steps)
        con.register("tl_device", device)
        with _transaction(con):
            _insert_run(
                con,
                run_id,
                content_hash,
                {"device": "cpu", **meta, "depth": depth, "source": "timeline"},
            )
            queries.execute(con, "ingest_timeline")
            queries.execute(con, "host_segments", {"run_id": run_id})
            con.execute(
                "INSERT INTO step_rules VALUES (?, 'bubblelab', 'in-process timeline', "
                "NULL, NULL, NULL, NULL)",
                [run_id],
            )
            _derive_ours(con, run_id)
    finally:
        for name in ("tl_host", "tl_steps", "tl_device"):
            con.unregister(name)
    return run_id


def _checked_meta(meta: dict | None) -> dict:
    meta = dict(meta or {})
    unknown = sorted(set(meta) - META_KEYS)
    if unknown:
        raise BubblelabError(
            f"unknown run metadata {', '.join(unknown)} (known: {', '.join(sorted(META_KEYS))})"
        )
    return meta


def _insert_run(
    con: duckdb.DuckDBPyConnection, run_id: str, content_hash: str, values: dict
) -> None:
    row = {**{c: None for c in RUN_COLUMNS}, **values, "run_id": run_id}
    if isinstance(row.get("command"), (list, tuple)):
        row["command"] = json.dumps(list(row["command"]))
    columns = ", ".join(f'"{c}"' for c in RUN_COLUMNS)
    con.execute(
        f"INSERT INTO runs (content_hash, {columns}) VALUES (?, "
        f"{', '.join('?' * len(RUN_COLUMNS))})",
        [content_hash, *(row[c] for c in RUN_COLUMNS)],
    )


@contextmanager
def plain_sqlite(trace: Path) -> Iterator[Path]:
    """The trace itself; for a gzipped one (as committed) a decompressed temporary copy, since
    SQLite needs random access; for a .nsys-rep its SQLite export (nsys must be on PATH or in
    $NSYS). Errors name the file the user gave."""
    if trace.suffix not in (".gz", ".nsys-rep"):
        yield trace
        return
    if not trace.is_file():
        raise BubblelabError(f"{trace}: no such trace file")
    with tempfile.TemporaryDirectory(prefix="bubblelab-") as tmp:
        plain = Path(tmp) / (trace.stem + (".sqlite" if trace.suffix == ".nsys-rep" else ""))
        if trace.suffix == ".nsys-rep":
            try:
                export_sqlite(trace, plain)
            except BubblelabError as e:
                raise BubblelabError(
                    f"{trace}: cannot export it to SQLite ({e}); or run `nsys export --type "
                    "sqlite` "
                    "on it where nsys is installed and analyse the .sqlite"
                ) from None
        else:
            try:
                with gzip.open(trace) as src, plain.open("wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
            except (OSError, EOFError) as e:
                raise BubblelabError(f"{trace}: cannot decompress ({e})") from None
        try:
            yield plain
        except BubblelabError as e:
            raise BubblelabError(str(e).replace(str(plain), str(trace))) from None


@contextmanager
def _transaction(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """All of a run or none of it: an exception or interrupt midway rolls everything back.
    Its price under DuckDB 1.5: the planner counts a transaction's own rows as none (fixed in 2.0,
    duckdb PR #21573), so joins on them can build on the million-row side; ~1 s of the 1M-kernel
    eager trace's ~7 s ingest. The sqlite extension's wheel stops at 1.5 (pyproject.toml)."""
    con.begin()
    try:
        yield
    except BaseException:
        con.rollback()
        raise
    con.commit()


def _known_run(con: duckdb.DuckDBPyConnection, content_hash: str) -> str | None:
    row = con.execute("SELECT run_id FROM runs WHERE content_hash = ?", [content_hash]).fetchone()
    return row[0] if row else None
