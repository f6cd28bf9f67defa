"""Is this file an nsys SQLite export we can analyse, and can its values be believed? One
BubblelabError line per kind of bad input.

Checked before anything is copied: a missing file, not SQLite, a truncated file, SQLite that is not
an nsys export, an export schema other than 3.x, graph launches of which nothing ran on the GPU (no
graph-node kernels, no whole-graph rows), and a trace without kernels or graph replays. A capture
with --cuda-graph-trace=graph is read: each replay is one GPU op (the kernel view says its kernels
were not traced). Also reads what the trace itself knows: the run metadata,
whether it holds ranges of our NVTX domain, and (`gpu_parts`, once DuckDB has it attached) which
processes and GPUs ran GPU work (each becomes a run of its own).

Checked once a run's rows are copied (sql/check_values.sql, before anything is derived from them):
intervals that end before they start, GPU ops of zero length or starting before the call that
launched them, timestamps outside the capture's range (`capture_range`), ops overlapping on one
stream. Bad rows are dropped and counted (`value_warnings` words them, one line each); a run that
loses more than DAMAGED_SHARE of its GPU ops or CUDA calls is refused (`refuse_damaged`): its
figures would rest on what is left.
"""

from __future__ import annotations

import hashlib
import sqlite3
import struct
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import duckdb

from ..core.contract import DOMAIN
from ..core.errors import BubblelabError
from . import queries

SUPPORTED_SCHEMA_MAJOR = "3"  # nsys 2021-2025 exports; the probe trace is 3.20.3
DAMAGED_SHARE = 0.05  # a run losing more of its GPU ops or CUDA calls to bad values is refused
OVERLAP_NS = 10_000  # ops overlapping the one before on their stream by more are counted


@dataclass(frozen=True)
class Part:
    """One process on one GPU: the unit a run covers (a tensor-parallel engine has one per rank)."""

    pid: int  # nsys globalPid
    device: int  # deviceId
    ops: int  # kernels, copies and memsets it ran

    def __str__(self) -> str:
        return f"pid {(self.pid >> 24) & 0xFFFFFF} on GPU {self.device} ({self.ops} GPU ops)"


@dataclass
class TraceFacts:
    content_hash: str  # sha256 of the file: the run's identity in the catalog
    tables: set[str]  # nsys creates tables lazily: absent means no such events
    export_meta: dict[str, str]  # META_DATA_EXPORT
    run: dict  # run metadata columns the trace knows (device, driver, versions, start)
    has_domain: bool  # holds push/pop ranges of our NVTX domain


def inspect_trace(trace: Path, domain: str = DOMAIN) -> TraceFacts:
    """Check that `trace` is an nsys SQLite export we can analyse; return what ingestion needs to
    know."""
    _check_sqlite_file(trace)
    try:
        db = sqlite3.connect(f"{trace.resolve().as_uri()}?mode=ro", uri=True)
        try:
            return _inspect(db, trace, domain)
        finally:
            db.close()
    except (sqlite3.DatabaseError, UnicodeDecodeError) as e:  # text not UTF-8 is damage too
        raise BubblelabError(f"{trace}: damaged SQLite file ({e})") from None


def _check_sqlite_file(trace: Path) -> None:
    if not trace.is_file():
        raise BubblelabError(f"{trace}: no such trace file")
    with trace.open("rb") as f:
        header = f.read(100)
    if header.startswith(b"\x1f\x8b"):  # gzip's magic: a compressed export under another name
        raise BubblelabError(
            f"{trace}: a gzip-compressed file; name it *.sqlite.gz (read as it is) or gunzip it"
        )
    if len(header) < 100 or not header.startswith(b"SQLite format 3\x00"):
        raise BubblelabError(
            f"{trace}: not an SQLite file (expected `nsys export --type sqlite` output)"
        )
    # The header records the database size in pages; a shorter file was cut off (copy or export
    # interrupted).
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
    _refuse_untraced_graphs(db, trace, tables)
    if not any(_has_rows(db, tables, t) for t in COMPUTE_TABLES):
        raise BubblelabError(f"{trace}: no kernels in the trace ({_found(db, tables)})")
    has_domain = bool(
        "NVTX_EVENTS" in tables
        and db.execute(
            "SELECT 1 FROM NVTX_EVENTS d WHERE d.eventType = 75 AND d.text = ? AND EXISTS ("
            " SELECT 1 FROM NVTX_EVENTS r WHERE r.domainId = d.domainId AND r.eventType = 59) "
            "LIMIT 1",
            [domain],
        ).fetchone()
    )
    return TraceFacts(_sha256(trace), tables, meta, _run_facts(db, tables, meta), has_domain)


GRAPH_TRACE = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"  # a replay traced whole (--cuda-graph-trace=graph)
COMPUTE_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", GRAPH_TRACE)
GPU_TABLES = (*COMPUTE_TABLES, "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")


def _has_rows(db: sqlite3.Connection, tables: set[str], table: str) -> bool:
    return table in tables and bool(db.execute(f"SELECT 1 FROM {table} LIMIT 1").fetchone())


def gpu_parts(con: duckdb.DuckDBPyConnection, trace: Path, tables: set[str]) -> list[Part]:
    """Processes x GPUs that ran kernels, graph replays, copies or memsets, most ops first, from
    the trace attached as `ns` (inspect_trace first: DuckDB counts a million rows in a third of
    SQLite's time)."""
    selects = [f"SELECT globalPid, deviceId FROM ns.{t}" for t in GPU_TABLES if t in tables]
    rows = con.execute(
        f"SELECT globalPid, deviceId, count(*) FROM ({' UNION ALL '.join(selects)}) "
        "GROUP BY 1, 2 ORDER BY 3 DESC, 1, 2"
    ).fetchall()
    if any(not isinstance(pid, int) or not isinstance(device, int) for pid, device, _ in rows):
        raise BubblelabError(
            f"{trace}: GPU activity without a process or GPU id (a damaged export?)"
        )
    return [Part(pid, device, ops) for pid, device, ops in rows]


def _found(db: sqlite3.Connection, tables: set[str]) -> str:
    """What a trace without kernels holds instead, for the error line."""
    counts = {
        "CUDA API calls": "CUPTI_ACTIVITY_KIND_RUNTIME",
        "copies": "CUPTI_ACTIVITY_KIND_MEMCPY",
        "memsets": "CUPTI_ACTIVITY_KIND_MEMSET",
        "NVTX events": "NVTX_EVENTS",
    }
    found = [
        f"{db.execute(f'SELECT count(*) FROM {table}').fetchone()[0]} {what}"
        for what, table in counts.items()
        if table in tables
    ]
    return (", ".join(found) or "no CUDA events at all") + (
        "; was CUDA traced (-t cuda) and did the capture range cover the GPU work?"
    )


def _refuse_untraced_graphs(db: sqlite3.Connection, trace: Path, tables: set[str]) -> None:
    """Graph launches whose replays left no row (neither their kernels, traced by node, nor the
    replay, traced whole): an empty kernel table is not an idle GPU."""
    hint = "re-profile with --cuda-graph-trace=graph (or node, to see their kernels)"
    if "CUPTI_ACTIVITY_KIND_RUNTIME" not in tables or _has_rows(db, tables, GRAPH_TRACE):
        return
    # The cheap questions first (a million calls or kernels each): any graph launch, then any
    # graph-node kernel; the launches are counted only for the error line.
    launches = (
        "FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE nameId IN (SELECT id FROM StringIds "
        "WHERE value LIKE 'cudaGraphLaunch%' OR value LIKE 'cuGraphLaunch%')"
    )
    if not db.execute(f"SELECT 1 {launches} LIMIT 1").fetchone():
        return
    node_kernels = (
        "CUPTI_ACTIVITY_KIND_KERNEL" in tables
        and db.execute(
            "SELECT 1 FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE graphNodeId IS NOT NULL LIMIT 1"
        ).fetchone()
    )
    if not node_kernels:
        graph_launches = db.execute(f"SELECT count(*) {launches}").fetchone()[0]
        raise BubblelabError(
            f"{trace}: {graph_launches} CUDA graph launches but no graph-node kernels and no "
            f"whole-graph replays; {hint}"
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
        if isinstance(epoch_ns, int):
            facts["started_at"] = datetime.fromtimestamp(epoch_ns / 1e9, UTC).replace(tzinfo=None)
    return facts


def _sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def capture_range(con: duckdb.DuckDBPyConnection, tables: set[str]) -> tuple[float, float]:
    """The time range the capture covered (sql/capture_range.sql), from the trace attached as `ns`:
    where its CUDA API calls lie, or its kernels (graph replays) in a trace without calls."""
    calls, kernels = "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL"
    table = calls if calls in tables else kernels if kernels in tables else GRAPH_TRACE
    starts = con.sql(f"SELECT start FROM ns.{table} WHERE start IS NOT NULL")
    lo, hi = queries.run(con, "capture_range", starts=starts).iloc[0]
    return float(lo), float(hi)


def check_values(
    con: duckdb.DuckDBPyConnection, run_id: str, capture: tuple[float, float], what: str
) -> None:
    """Drop and count the run's rows that cannot be believed (sql/check_values.sql); refuse the run
    when more than DAMAGED_SHARE of its GPU ops or CUDA calls went."""
    lo, hi = capture
    params = {"run_id": run_id, "lo": lo, "hi": hi, "overlap_ns": OVERLAP_NS}
    queries.execute(con, "check_values", params)
    rows = con.execute(
        "SELECT what, sum(count), any_value(total) FROM trace_checks "
        "WHERE run_id = ? AND action = 'dropped' AND what IN ('GPU ops', 'CUDA API calls') "
        "GROUP BY what ORDER BY what DESC",
        [run_id],
    ).fetchall()
    for rows_of, dropped, total in rows:
        if dropped > DAMAGED_SHARE * total:
            problems = "; ".join(
                f"{n} {problem}"
                for n, problem in con.execute(
                    "SELECT count, problem FROM trace_checks WHERE run_id = ? AND what = ? "
                    "AND action = 'dropped' ORDER BY count DESC, problem",
                    [run_id, rows_of],
                ).fetchall()
            )
            raise BubblelabError(
                f"{what}: {dropped} of {total} {rows_of} cannot be believed ({problems}): "
                "the trace's timestamps are damaged, its figures would rest on what is left"
            )


def value_warnings(con: duckdb.DuckDBPyConnection, run_id: str) -> list[str]:
    """What the value checks found in a run, one line each: '12 of 33959 GPU ops dropped: end
    before start'."""
    rows = con.execute(
        "SELECT what, problem, count, total, action FROM trace_checks WHERE run_id = ? "
        "ORDER BY what, count DESC, problem",
        [run_id],
    ).fetchall()
    return [
        f"{n} of {total} {what} {action}: {problem}" for what, problem, n, total, action in rows
    ]
