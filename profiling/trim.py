"""Trim an nsys SQLite export to a window of steps, keeping only what the analysis reads.

Committed traces must stay small: a window of a few hundred steps, and the tables the ingestion queries
(NVTX, kernels, copies, memsets, runtime calls, syncs) plus the small metadata tables, verbatim.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from bubblelab.errors import BubblelabError

TIMED_TABLES = (
    "NVTX_EVENTS",
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
)
WHOLE_TABLES = (
    "StringIds",
    "META_DATA_EXPORT",
    "META_DATA_CAPTURE",
    "TARGET_INFO_SESSION_START_TIME",
    "TARGET_INFO_GPU",
    "TARGET_INFO_CUDA_DEVICE",
    "ThreadNames",
    "PROCESSES",
)


def step_window(
    db: sqlite3.Connection, first: int, last: int, domain: str = "bubblelab"
) -> tuple[int, int]:
    """Time span of our host ranges whose step payload lies in [first, last]."""
    row = db.execute(
        """
        SELECT min(e.start), max(e."end") FROM NVTX_EVENTS e
        JOIN NVTX_EVENTS d ON d.eventType = 75 AND d.domainId = e.domainId AND d.text = ?
        WHERE e.eventType = 59 AND COALESCE(e.int64Value, e.uint64Value) BETWEEN ? AND ?""",
        (domain, first, last),
    ).fetchone()
    if row is None or row[0] is None:
        raise BubblelabError(f"no {domain} ranges for steps {first}..{last} in the trace")
    return row


def trim(
    src: Path,
    dst: Path,
    first: int,
    last: int,
    domain: str = "bubblelab",
    slack_ns: int = 2_000_000,
) -> Path:
    """Write to dst the rows of src inside the steps' window (plus slack for the GPU lagging the host)."""
    src, dst = Path(src), Path(dst)
    if dst.exists():
        dst.unlink()
    db = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
    t0, t1 = step_window(db, first, last, domain)
    t1 += slack_ns
    tables = {
        name: sql
        for name, sql in db.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'")
    }
    db.close()
    out = sqlite3.connect(dst)
    out.execute("ATTACH ? AS src", (f"file:{src}?mode=ro",))
    for name in (*WHOLE_TABLES, *TIMED_TABLES):
        if name not in tables:
            continue
        out.execute(tables[name])
        if name == "NVTX_EVENTS":  # domain creations and registered strings have no time window
            where = "WHERE eventType IN (33, 75) OR (start >= ? AND start <= ?)"
        elif name in TIMED_TABLES:
            where = "WHERE start >= ? AND start <= ?"
        else:
            where = ""
        params = (t0, t1) if where else ()
        out.execute(f'INSERT INTO main."{name}" SELECT * FROM src."{name}" {where}', params)
    out.commit()
    out.execute("DETACH src")
    out.execute("VACUUM")
    out.close()
    return dst
