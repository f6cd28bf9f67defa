"""Is this file an nsys SQLite export we can analyse? One BubblelabError line per kind of bad input.

Checked before anything is copied: a missing file, not SQLite, a truncated file, SQLite that is not an nsys
export, an export schema other than 3.x, a graph-mode capture (kernels hidden inside graph replays), and a
trace without ranges of our NVTX domain. Also reads the run metadata the trace itself knows.
"""

from __future__ import annotations

import hashlib
import sqlite3
import struct
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from bubblelab.engine.phases import DOMAIN
from bubblelab.errors import BubblelabError

SUPPORTED_SCHEMA_MAJOR = "3"  # nsys 2021-2025 exports; the probe trace is 3.20.3


@dataclass
class TraceFacts:
    content_hash: str  # sha256 of the file: the run's identity in the catalog
    tables: set[str]  # nsys creates tables lazily: absent means no such events
    export_meta: dict[str, str]  # META_DATA_EXPORT
    run: dict  # run metadata columns the trace knows (device, driver, versions, start)


def inspect_trace(trace: Path, domain: str = DOMAIN) -> TraceFacts:
    """Check that `trace` is an nsys SQLite export we can analyse; return what ingestion needs to know."""
    _check_sqlite_file(trace)
    try:
        db = sqlite3.connect(f"{trace.resolve().as_uri()}?mode=ro", uri=True)
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
        raise BubblelabError(
            f"{trace}: not an SQLite file (expected `nsys export --type sqlite` output)"
        )
    # The header records the database size in pages; a shorter file was cut off (copy or export interrupted).
    page_size = struct.unpack(">H", header[16:18])[0]
    page_size = 65536 if page_size == 1 else page_size
    change_counter, pages, valid_for = (
        struct.unpack(">I", header[o : o + 4])[0] for o in (24, 28, 92)
    )
    if valid_for == change_counter and pages * page_size > trace.stat().st_size:
        raise BubblelabError(
            f"{trace}: truncated SQLite file ({trace.stat().st_size} of {pages * page_size} bytes)"
        )


def _inspect(db: sqlite3.Connection, trace: Path, domain: str) -> TraceFacts:
    tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "META_DATA_EXPORT" not in tables:
        raise BubblelabError(
            f"{trace}: SQLite, but not an Nsight Systems export (no META_DATA_EXPORT table)"
        )
    meta = dict(db.execute("SELECT name, value FROM META_DATA_EXPORT"))
    schema = meta.get("EXPORT_SCHEMA_VERSION")
    if schema is None:
        raise BubblelabError(
            f"{trace}: SQLite, but not an Nsight Systems export (no EXPORT_SCHEMA_VERSION)"
        )
    if schema.split(".")[0] != SUPPORTED_SCHEMA_MAJOR:
        raise BubblelabError(
            f"{trace}: unsupported nsys export schema {schema} "
            f"(bubblelab reads schema {SUPPORTED_SCHEMA_MAJOR}.x)"
        )
    _refuse_graph_mode(db, trace, tables)
    has_domain = (
        "NVTX_EVENTS" in tables
        and db.execute(
            "SELECT 1 FROM NVTX_EVENTS d WHERE d.eventType = 75 AND d.text = ? AND EXISTS ("
            " SELECT 1 FROM NVTX_EVENTS r WHERE r.domainId = d.domainId AND r.eventType = 59) LIMIT 1",
            [domain],
        ).fetchone()
    )
    if not has_domain:
        raise BubblelabError(
            f"{trace}: no NVTX ranges of domain '{domain}' "
            "(was the engine run with profiling on, and nsys with -t nvtx?)"
        )
    return TraceFacts(_sha256(trace), tables, meta, _run_facts(db, tables, meta))


def _refuse_graph_mode(db: sqlite3.Connection, trace: Path, tables: set[str]) -> None:
    """Graph replays traced as whole graphs hide their kernels: an empty kernel table is not an idle GPU."""
    hint = "re-profile with --cuda-graph-trace=node"
    if (
        "CUPTI_ACTIVITY_KIND_GRAPH_TRACE" in tables
        and db.execute("SELECT 1 FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE LIMIT 1").fetchone()
    ):
        raise BubblelabError(
            f"{trace}: CUDA graphs were traced as whole graphs, their kernels are hidden; {hint}"
        )
    if "CUPTI_ACTIVITY_KIND_RUNTIME" not in tables:
        return
    graph_launches = db.execute(
        "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE nameId IN (SELECT id FROM StringIds "
        "WHERE value LIKE 'cudaGraphLaunch%' OR value LIKE 'cuGraphLaunch%')"
    ).fetchone()[0]
    node_kernels = (
        "CUPTI_ACTIVITY_KIND_KERNEL" in tables
        and db.execute(
            "SELECT 1 FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE graphNodeId IS NOT NULL LIMIT 1"
        ).fetchone()
    )
    if graph_launches and not node_kernels:
        raise BubblelabError(
            f"{trace}: {graph_launches} CUDA graph launches but no graph-node kernels; {hint}"
        )


def _run_facts(db: sqlite3.Connection, tables: set[str], meta: dict) -> dict:
    """Run metadata the trace itself knows: GPU, driver, nsys and schema versions, start time."""

    def one(sql: str) -> object:
        row = db.execute(sql).fetchone()
        return row[0] if row else None

    facts = {
        "nsys_version": meta.get("EXPORT_PRODUCT_VERSION"),
        "schema_version": meta["EXPORT_SCHEMA_VERSION"],
    }
    if "TARGET_INFO_GPU" in tables:
        facts["device"] = one("SELECT name FROM TARGET_INFO_GPU ORDER BY id LIMIT 1")
    if "TARGET_INFO_SYSTEM_ENV" in tables:
        facts["driver"] = one(
            "SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'NvDriverVersion'"
        )
    if "TARGET_INFO_SESSION_START_TIME" in tables:
        epoch_ns = one("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME")
        if epoch_ns is not None:
            facts["started_at"] = datetime.fromtimestamp(epoch_ns / 1e9, UTC).replace(
                tzinfo=None
            )
    return facts


def _sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()
