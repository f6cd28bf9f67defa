"""The committed foreign fixtures' raw SQLite rows in plain Python: CUDA calls, the GPU ops they
launched (matched by correlation id), CUPTI sync records, NVTX ranges and OS calls, with no SQL
beyond one SELECT a table. tests/fixture_rows.py finds the steps from them.
"""

from __future__ import annotations

import re
import sqlite3
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

BLOCKING_NAME = re.compile(r"^cu(da)?(Device|Ctx|Stream|Event)Synchronize")
SYNC_MEMCPY = re.compile(r"^cu(da)?Memcpy(2D|3D|DtoH|HtoD|DtoD|AtoH|HtoA)?(_v\d+)?$")
POLL = re.compile(r"^cu(da)?(EventQuery|StreamQuery|StreamWaitEvent)")
COPY_NAMES = {1: "HtoD", 2: "DtoH", 8: "DtoD", 10: "PtoP"}
DTOH = 2


@dataclass
class Call:
    tid: int
    pid: int
    start: int
    end: int
    corr: int
    name: str
    ops: list = field(default_factory=list)  # the GPU ops it launched


@dataclass
class Op:
    op: str  # kernel | memcpy | memset
    start: int
    end: int
    pid: int
    corr: int
    name: str
    graph: bool
    copy_kind: int | None = None
    pageable: bool = False
    nbytes: int | None = None
    call: Call | None = None
    node: int | None = None  # graphNodeId


@dataclass
class Rows:
    calls: list[Call]
    ops: list[Op]
    sync_types: dict  # (pid, corr) -> set of CUPTI syncTypes
    ranges: list[tuple]  # (tid, start, end, name, eventType): NVTX ranges, any domain
    os_calls: list[tuple]  # (tid, start, end, name)

    def blocks(self, c: Call) -> bool:
        """A host-blocking call: a blocking sync record or name, never a poll."""
        record = self.sync_types.get((c.pid, c.corr), set()) & {1, 3, 4}
        named = BLOCKING_NAME.match(c.name) or SYNC_MEMCPY.match(c.name)
        return bool(record or named) and not POLL.match(c.name)


def load(path: Path) -> Rows:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    names = dict(db.execute("SELECT id, value FROM StringIds"))
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    calls = [
        Call(tid, tid - tid % 16777216, s, e, corr, names[n])
        for tid, s, e, corr, n in db.execute(
            'SELECT globalTid, start, "end", correlationId, nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME'
        )
    ]
    by_corr = {(c.pid, c.corr): c for c in calls}
    assert len(by_corr) == len(calls), "a correlation id names two calls"
    ops = [
        Op("kernel", s, e, pid, corr, names[n], g is not None, node=g)
        for s, e, pid, corr, n, g in db.execute(
            'SELECT start, "end", globalPid, correlationId, shortName, graphNodeId '
            "FROM CUPTI_ACTIVITY_KIND_KERNEL"
        )
    ]
    if "CUPTI_ACTIVITY_KIND_MEMCPY" in tables:
        ops += [
            Op(
                "memcpy",
                s,
                e,
                pid,
                corr,
                COPY_NAMES.get(k, f"copy kind {k}"),
                g is not None,
                k,
                0 in (src, dst),
                b,
            )  # fmt: skip
            for s, e, pid, corr, k, src, dst, b, g in db.execute(
                'SELECT start, "end", globalPid, correlationId, copyKind, srcKind, dstKind, bytes, '
                "graphNodeId FROM CUPTI_ACTIVITY_KIND_MEMCPY"
            )
        ]
    if "CUPTI_ACTIVITY_KIND_MEMSET" in tables:
        ops += [
            Op("memset", s, e, pid, corr, "memset", g is not None)
            for s, e, pid, corr, g in db.execute(
                'SELECT start, "end", globalPid, correlationId, graphNodeId '
                "FROM CUPTI_ACTIVITY_KIND_MEMSET"
            )
        ]
    for o in ops:
        o.call = by_corr.get((o.pid, o.corr))
        if o.call:
            o.call.ops.append(o)
    sync_types: dict = defaultdict(set)
    if "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION" in tables:
        for pid, corr, kind in db.execute(
            "SELECT globalPid, correlationId, syncType FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
        ):
            sync_types[(pid, corr)].add(kind)
    ranges = []
    if "NVTX_EVENTS" in tables:
        ranges = [
            (tid, s, e, names.get(text_id) if text_id is not None else text, kind)
            for tid, s, e, text_id, text, kind in db.execute(
                'SELECT globalTid, start, "end", textId, text, eventType FROM NVTX_EVENTS '
                'WHERE eventType IN (59, 60) AND "end" IS NOT NULL'
            )
        ]
    os_calls = []
    if "OSRT_API" in tables:
        os_calls = [
            (tid, s, e, names[n])
            for tid, s, e, n in db.execute('SELECT globalTid, start, "end", nameId FROM OSRT_API')
            if e > s
        ]
    db.close()
    return Rows(calls, ops, dict(sync_types), ranges, os_calls)


def engine_thread(rows: Rows) -> int:
    """The thread whose calls launched the most GPU ops (ties: the lower id)."""
    counts = Counter(o.call.tid for o in rows.ops if o.call)
    return min(counts, key=lambda tid: (-counts[tid], tid))


def launch_times(rows: Rows) -> list[int]:
    """Start of every call that launched a GPU op, any thread, sorted, once each."""
    return sorted({o.call.start for o in rows.ops if o.call})
