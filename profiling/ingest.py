"""Ingest an nsys SQLite export (checked by trace_check) or an in-process Timeline into the catalog as one run.

A run is keyed by the sha256 of its content, so ingesting the same trace twice returns the same run_id and
adds nothing. Everything a run adds happens in one transaction: an interrupted ingest leaves no half run.
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

from bubblelab.engine.phases import DOMAIN
from bubblelab.engine.timeline import Timeline
from bubblelab.errors import BubblelabError
from bubblelab.profiling import queries
from bubblelab.profiling.catalog import RUN_COLUMNS, connect, load_sqlite_extension, sql_string
from bubblelab.profiling.trace_check import inspect_trace

# (nsys table, ingestion statement); tables are created lazily, so a missing one means "no such events".
OPTIONAL_TABLES = (
    ("CUPTI_ACTIVITY_KIND_KERNEL", "ingest_kernels"),
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
    con: duckdb.DuckDBPyConnection | None = None,
) -> str:
    """Add an nsys SQLite export (or a gzip of one) to the catalog; returns its run_id (the same on re-ingest)."""
    trace = Path(trace)
    meta = _checked_meta(meta)
    with _plain_sqlite(trace) as plain:
        facts = inspect_trace(plain, domain)
        con = con or connect(catalog)
        known = _known_run(con, facts.content_hash)
        if known:
            return known
        run_id = facts.content_hash[:16]
        load_sqlite_extension(con)
        try:
            con.execute(f"ATTACH {sql_string(str(plain))} AS ns (TYPE sqlite, READ_ONLY)")
            with _transaction(con):
                _insert_run(
                    con,
                    run_id,
                    facts.content_hash,
                    {**facts.run, **meta, "source": "nsys", "trace_path": str(trace.resolve())},
                )
                con.executemany(
                    "INSERT INTO trace_meta VALUES (?, ?, ?)",
                    [(run_id, k, v) for k, v in facts.export_meta.items()],
                )
                params = {"run_id": run_id}
                queries.execute(con, "ingest_host_ranges", {**params, "domain": domain})
                queries.execute(con, "ingest_step_info", {**params, "domain": domain})
                queries.execute(con, "host_segments", params)
                if "CUPTI_ACTIVITY_KIND_RUNTIME" in facts.tables:
                    queries.execute(con, "ingest_api_calls", params)
                for table, statement in OPTIONAL_TABLES:
                    if table in facts.tables:
                        queries.execute(con, statement, params)
                queries.execute(con, "gpu_busy", params)
                queries.execute(con, "step_spans", params)
                queries.execute(con, "run_defaults", params)
                queries.insert(con, "steps", "per_step", params)
        except duckdb.Error as e:
            raise BubblelabError(
                f"{trace}: cannot read the trace ({str(e).splitlines()[0]})"
            ) from None
        finally:
            con.execute("DETACH DATABASE IF EXISTS ns")
    return run_id


def ingest_timeline(
    timeline: Timeline,
    con: duckdb.DuckDBPyConnection,
    meta: dict | None = None,
    run_id: str | None = None,
) -> str:
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
            _insert_run(
                con,
                run_id,
                content_hash,
                {"device": "cpu", **meta, "depth": depth, "source": "timeline"},
            )
            queries.execute(con, "ingest_timeline")
            queries.execute(con, "host_segments", {"run_id": run_id})
            queries.execute(con, "gpu_busy", {"run_id": run_id})
            queries.execute(con, "step_spans", {"run_id": run_id})
            queries.execute(con, "run_defaults", {"run_id": run_id})
            queries.insert(con, "steps", "per_step", {"run_id": run_id})
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
        f"INSERT INTO runs (content_hash, {columns}) VALUES (?, {', '.join('?' * len(RUN_COLUMNS))})",
        [content_hash, *(row[c] for c in RUN_COLUMNS)],
    )


@contextmanager
def _plain_sqlite(trace: Path) -> Iterator[Path]:
    """The trace itself, or for a gzipped one (as committed) a decompressed temporary copy, since SQLite needs
    random access. Errors name the file the user gave."""
    if trace.suffix != ".gz":
        yield trace
        return
    with tempfile.TemporaryDirectory(prefix="bubblelab-") as tmp:
        plain = Path(tmp) / trace.stem
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
