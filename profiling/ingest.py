"""Ingest an nsys SQLite export (or an in-process Timeline) into the catalog as one run.

A run is keyed by the sha256 of its content, so ingesting the same trace twice returns the same run_id and
adds nothing. Everything a run adds happens in one transaction: an interrupted ingest leaves no half run.
"""
from __future__ import annotations

import hashlib
import json
import sqlite3
import struct
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

import duckdb
import pandas as pd

from engine.errors import BubblelabError
from profiling import queries
from profiling.catalog import RUN_COLUMNS, connect, load_sqlite_extension, sql_string
from profiling.phases import DOMAIN
from profiling.timeline import Timeline

SUPPORTED_SCHEMA_MAJOR = "3"  # nsys 2021-2025 exports; the probe trace is 3.20.3
# (nsys table, ingestion statement); tables are created lazily, so a missing one means "no such events".
OPTIONAL_TABLES = (("CUPTI_ACTIVITY_KIND_KERNEL", "ingest_kernels"),
                   ("CUPTI_ACTIVITY_KIND_MEMCPY", "ingest_memcpys"),
                   ("CUPTI_ACTIVITY_KIND_MEMSET", "ingest_memsets"),
                   ("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "ingest_syncs"))
META_KEYS = frozenset(RUN_COLUMNS) - {"run_id", "source", "trace_path", "schema_version"}  # given values win


def ingest(trace: Path, catalog: Path | str | None, meta: dict | None = None, *, domain: str = DOMAIN,
           con: duckdb.DuckDBPyConnection | None = None) -> str:
    """Add an nsys SQLite export to the catalog; returns its run_id (the same one on re-ingest)."""
    trace = Path(trace)
    facts = inspect_trace(trace, domain)
    meta = _checked_meta(meta)
    con = con or connect(catalog)
    known = _known_run(con, facts["content_hash"])
    if known:
        return known
    run_id = facts["content_hash"][:16]
    load_sqlite_extension(con)
    try:
        con.execute(f"ATTACH {sql_string(str(trace))} AS ns (TYPE sqlite, READ_ONLY)")
        with _transaction(con):
            _insert_run(con, run_id, facts["content_hash"], {
                **facts["run"], **meta, "source": "nsys", "trace_path": str(trace.resolve())})
            con.executemany("INSERT INTO trace_meta VALUES (?, ?, ?)",
                            [(run_id, k, v) for k, v in facts["meta"].items()])
            params = {"run_id": run_id}
            queries.execute(con, "ingest_host_ranges", {**params, "domain": domain})
            queries.execute(con, "ingest_step_info", {**params, "domain": domain})
            queries.execute(con, "host_segments", params)
            if "CUPTI_ACTIVITY_KIND_RUNTIME" in facts["tables"]:
                queries.execute(con, "ingest_api_calls", params)
            for table, statement in OPTIONAL_TABLES:
                if table in facts["tables"]:
                    queries.execute(con, statement, params)
            queries.execute(con, "gpu_busy", params)
            queries.execute(con, "run_defaults", params)
            queries.insert(con, "steps", "per_step", params)
    except duckdb.Error as e:
        raise BubblelabError(f"{trace}: cannot read the trace ({str(e).splitlines()[0]})") from None
    finally:
        con.execute("DETACH DATABASE IF EXISTS ns")
    return run_id


def ingest_timeline(timeline: Timeline, con: duckdb.DuckDBPyConnection, meta: dict | None = None,
                    run_id: str | None = None) -> str:
    """Store an in-process Timeline as a run (source 'timeline') in the same tables an nsys run fills."""
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
            _insert_run(con, run_id, content_hash, {"device": "cpu", **meta, "depth": depth, "source": "timeline"})
            queries.execute(con, "ingest_timeline")
            queries.execute(con, "host_segments", {"run_id": run_id})
            queries.execute(con, "gpu_busy", {"run_id": run_id})
            queries.execute(con, "run_defaults", {"run_id": run_id})
            queries.insert(con, "steps", "per_step", {"run_id": run_id})
    finally:
        for name in ("tl_host", "tl_steps", "tl_device"):
            con.unregister(name)
    return run_id


def inspect_trace(trace: Path, domain: str = DOMAIN) -> dict:
    """Check that `trace` is an nsys SQLite export we can analyse; return its hash, tables and metadata.

    Every refusal is one BubblelabError line naming the problem.
    """
    _check_sqlite_file(trace)
    try:
        db = sqlite3.connect(f"file:{trace}?mode=ro", uri=True)
        try:
            return _inspect(db, trace, domain)
        finally:
            db.close()
    except sqlite3.DatabaseError as e:
        raise BubblelabError(f"{trace}: damaged SQLite file ({e})") from None


def _check_sqlite_file(trace: Path) -> None:
    if not trace.is_file():
        raise BubblelabError(f"{trace}: no such trace file")
    with trace.open("rb") as f:
        header = f.read(100)
    if len(header) < 100 or not header.startswith(b"SQLite format 3\x00"):
        raise BubblelabError(f"{trace}: not an SQLite file (expected `nsys export --type sqlite` output)")
    # The header records the database size in pages; a shorter file was cut off (copy or export interrupted).
    page_size = struct.unpack(">H", header[16:18])[0]
    page_size = 65536 if page_size == 1 else page_size
    change_counter, pages, valid_for = (struct.unpack(">I", header[o:o + 4])[0] for o in (24, 28, 92))
    if valid_for == change_counter and pages * page_size > trace.stat().st_size:
        raise BubblelabError(f"{trace}: truncated SQLite file ({trace.stat().st_size} of {pages * page_size} bytes)")


def _inspect(db: sqlite3.Connection, trace: Path, domain: str) -> dict:
    tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "META_DATA_EXPORT" not in tables:
        raise BubblelabError(f"{trace}: SQLite, but not an Nsight Systems export (no META_DATA_EXPORT table)")
    meta = dict(db.execute("SELECT name, value FROM META_DATA_EXPORT"))
    schema = meta.get("EXPORT_SCHEMA_VERSION")
    if schema is None:
        raise BubblelabError(f"{trace}: SQLite, but not an Nsight Systems export (no EXPORT_SCHEMA_VERSION)")
    if schema.split(".")[0] != SUPPORTED_SCHEMA_MAJOR:
        raise BubblelabError(f"{trace}: unsupported nsys export schema {schema} "
                             f"(bubblelab reads schema {SUPPORTED_SCHEMA_MAJOR}.x)")
    _refuse_graph_mode(db, trace, tables)
    has_domain = "NVTX_EVENTS" in tables and db.execute(
        "SELECT 1 FROM NVTX_EVENTS d WHERE d.eventType = 75 AND d.text = ? AND EXISTS ("
        " SELECT 1 FROM NVTX_EVENTS r WHERE r.domainId = d.domainId AND r.eventType = 59) LIMIT 1",
        [domain]).fetchone()
    if not has_domain:
        raise BubblelabError(f"{trace}: no NVTX ranges of domain '{domain}' "
                             "(was the engine run with profiling on, and nsys with -t nvtx?)")
    return {"content_hash": _sha256(trace), "tables": tables, "meta": meta,
            "run": _run_facts(db, tables, meta)}


def _refuse_graph_mode(db: sqlite3.Connection, trace: Path, tables: set[str]) -> None:
    """Graph replays traced as whole graphs hide their kernels: an empty kernel table is not an idle GPU."""
    hint = "re-profile with --cuda-graph-trace=node"
    if "CUPTI_ACTIVITY_KIND_GRAPH_TRACE" in tables and \
            db.execute("SELECT 1 FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE LIMIT 1").fetchone():
        raise BubblelabError(f"{trace}: CUDA graphs were traced as whole graphs, their kernels are hidden; {hint}")
    if "CUPTI_ACTIVITY_KIND_RUNTIME" not in tables:
        return
    graph_launches = db.execute(
        "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId "
        "WHERE s.value LIKE 'cudaGraphLaunch%' OR s.value LIKE 'cuGraphLaunch%'").fetchone()[0]
    node_kernels = "CUPTI_ACTIVITY_KIND_KERNEL" in tables and db.execute(
        "SELECT 1 FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE graphNodeId IS NOT NULL LIMIT 1").fetchone()
    if graph_launches and not node_kernels:
        raise BubblelabError(f"{trace}: {graph_launches} CUDA graph launches but no graph-node kernels; {hint}")


def _run_facts(db: sqlite3.Connection, tables: set[str], meta: dict) -> dict:
    """Run metadata the trace itself knows: GPU, driver, nsys and schema versions, start time."""
    def one(sql: str) -> object:
        row = db.execute(sql).fetchone()
        return row[0] if row else None

    facts = {"nsys_version": meta.get("EXPORT_PRODUCT_VERSION"), "schema_version": meta["EXPORT_SCHEMA_VERSION"]}
    if "TARGET_INFO_GPU" in tables:
        facts["device"] = one("SELECT name FROM TARGET_INFO_GPU ORDER BY id LIMIT 1")
    if "TARGET_INFO_SYSTEM_ENV" in tables:
        facts["driver"] = one("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'NvDriverVersion'")
    if "TARGET_INFO_SESSION_START_TIME" in tables:
        epoch_ns = one("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME")
        if epoch_ns is not None:
            facts["started_at"] = datetime.fromtimestamp(epoch_ns / 1e9, timezone.utc).replace(tzinfo=None)
    return facts


def _checked_meta(meta: dict | None) -> dict:
    meta = dict(meta or {})
    unknown = sorted(set(meta) - META_KEYS)
    if unknown:
        raise BubblelabError(f"unknown run metadata {', '.join(unknown)} (known: {', '.join(sorted(META_KEYS))})")
    return meta


def _insert_run(con: duckdb.DuckDBPyConnection, run_id: str, content_hash: str, values: dict) -> None:
    row = {**{c: None for c in RUN_COLUMNS}, **values, "run_id": run_id}
    if isinstance(row.get("command"), (list, tuple)):
        row["command"] = json.dumps(list(row["command"]))
    columns = ", ".join(f'"{c}"' for c in RUN_COLUMNS)
    con.execute(f"INSERT INTO runs (content_hash, {columns}) VALUES (?, {', '.join('?' * len(RUN_COLUMNS))})",
                [content_hash, *(row[c] for c in RUN_COLUMNS)])


@contextmanager
def _transaction(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """All of a run or none of it: an exception or interrupt midway rolls everything back."""
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


def _sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()
