"""The committed foreign fixtures read again by brute force: raw SQLite rows in plain Python, and
the steps found from them by the rules profiling/README.md states ("Finding the steps"), without
any of the SQL (tests/test_foreign_fixtures.py compares every figure with the analysis).

Sorting and bisecting only, so a trace of 100,000 kernels and CUDA calls reads in about a second;
tests/foreign_brute_force.py is the quadratic version for the small synthetic traces.
"""

from __future__ import annotations

import bisect
import math
import re
import sqlite3
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

BLOCKING_NAME = re.compile(r"^cu(da)?(Device|Ctx|Stream|Event)Synchronize")
SYNC_MEMCPY = re.compile(r"^cu(da)?Memcpy(2D|3D|DtoH|HtoD|DtoD|AtoH|HtoA)?(_v\d+)?$")
POLL = re.compile(r"^cu(da)?(EventQuery|StreamQuery|StreamWaitEvent)")
COPY_NAMES = {1: "HtoD", 2: "DtoH", 8: "DtoD", 10: "PtoP"}
DTOH = 2
MIN_STEPS, SPLIT_RATIO, GRAPH_SHARE = 3, 4.0, 0.5  # the constants profiling/README.md names


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
        Op("kernel", s, e, pid, corr, names[n], g is not None)
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


@dataclass
class Point:
    start: int
    end: int
    calls: int
    reads: int  # device-to-host copies its calls launched
    next_launch: int | None


def sync_points(rows: Rows, tid: int) -> list[Point]:
    """Runs of blocking events of thread tid with no other launch between them."""
    blocking = set()
    launches = []
    for c in rows.calls:
        if c.tid != tid:
            continue
        dtoh = any(o.op == "memcpy" and o.copy_kind == DTOH for o in c.ops)
        compute = any(not (o.op == "memcpy" and o.copy_kind == DTOH) for o in c.ops)
        if rows.blocks(c) or (dtoh and not compute):
            blocking.add((c.start, c.end, int(dtoh)))
        if compute:
            launches.append(c.start)
    launches.sort()
    groups: dict[int, list] = defaultdict(list)
    for (
        s,
        e,
        reads,
    ) in blocking:  # launches at the same instant come first (their end is their start)
        groups[
            bisect.bisect_right(launches, s) if e > s else bisect.bisect_left(launches, s)
        ].append((s, e, reads))
    points = [
        Point(
            min(s for s, _, _ in g),
            max(e for _, e, _ in g),
            len(g),
            sum(r for _, _, r in g),
            launches[n] if n < len(launches) else None,
        )
        for n, g in groups.items()
    ]
    return sorted(points, key=lambda p: p.start)


def closing_points(points: list[Point]) -> list[Point]:
    """The points that close a step: reading points only when >= MIN_STEPS read; of those, the ones
    above the largest >= SPLIT_RATIO jump in the sorted log host gaps after them, if they recur in
    a fixed pattern; else all."""
    reading = [p for p in points if p.reads > 0]
    if len(reading) >= MIN_STEPS:
        points = reading
    gaps = [None if p.next_launch is None else max(p.next_launch - p.end, 1000) for p in points]
    known = sorted(math.log(g) for g in gaps if g is not None)
    if len(known) >= 2:
        jumps = [b - a for a, b in zip(known, known[1:], strict=False)]
        i = jumps.index(max(jumps))
        if jumps[i] >= math.log(SPLIT_RATIO):
            cut = math.exp(known[i + 1]) * (1 - 1e-9)
            closing = [g is None or g >= cut for g in gaps]
            at = [k for k, c in enumerate(closing) if c]
            between = Counter(b - a - 1 for a, b in zip(at, at[1:], strict=False))
            regular = between and max(between.values()) >= 0.5 * sum(between.values())
            if len(at) >= MIN_STEPS and regular:
                return [p for p, c in zip(points, closing, strict=True) if c]
    return points


def with_work(windows: list[tuple[int, int]], launches: list[int]) -> list[tuple[int, int]]:
    """The windows in which something was launched."""
    return [
        (s, e)
        for s, e in windows
        if bisect.bisect_left(launches, e) > bisect.bisect_left(launches, s)
    ]


def sync_windows(rows: Rows, tid: int) -> list[tuple[int, int]]:
    closing = closing_points(sync_points(rows, tid))
    if not closing:
        return []
    launches = launch_times(rows)
    ends = [p.end for p in closing]
    starts = [launches[0] if launches else ends[0], *ends[:-1]]
    return with_work(list(zip(starts, ends, strict=True)), launches)


def graph_windows(rows: Rows, tid: int) -> list[tuple[int, int]]:
    """From one replay of the largest graphs to the next."""
    replays = Counter(
        (o.call.start, o.corr) for o in rows.ops if o.graph and o.call and o.call.tid == tid
    )
    if not replays:
        return []
    biggest = max(replays.values())
    big = sorted(start for (start, _), n in replays.items() if n >= GRAPH_SHARE * biggest)
    return with_work(list(zip(big, big[1:], strict=False)), launch_times(rows))


def range_windows(rows: Rows, regex: str) -> list[tuple[int, int]]:
    """The outermost matching ranges of the thread holding most matches; each runs to the next."""
    matches = [r for r in rows.ranges if re.search(regex, r[3] or "")]
    per_thread = Counter(r[0] for r in matches)
    tid = min(per_thread, key=lambda t: (-per_thread[t], t))
    outer, reach = [], None
    for _, s, e, _, _ in sorted((r for r in matches if r[0] == tid), key=lambda r: (r[1], -r[2])):
        if reach is None or s >= reach:
            outer.append((s, e))
        reach = e if reach is None else max(reach, e)
    windows = [(s, outer[k + 1][0] if k + 1 < len(outer) else e) for k, (s, e) in enumerate(outer)]
    return with_work(windows, launch_times(rows))


def coverage(rows: Rows, first: int, last: int) -> float:
    total = sum(o.end - o.start for o in rows.ops)
    inside = sum(o.end - o.start for o in rows.ops if o.call and first <= o.call.start < last)
    return inside / total if total else 0.0


def spread(windows: list[tuple[int, int]]) -> float:
    """Robust coefficient of variation of the window lengths."""
    lengths = [e - s for s, e in windows]
    median = statistics.median(lengths)
    mad = statistics.median(abs(x - median) for x in lengths)
    return 1.4826 * mad / median if median > 0 else math.inf


def find_steps(rows: Rows, step_range: str | None = None) -> tuple[str, list[tuple[int, int]]]:
    """(rule, windows): the step range if named; else the better of sync and graph."""
    if step_range:
        return "nvtx", range_windows(rows, step_range)
    tid = engine_thread(rows)
    candidates = [
        (rule, w)
        for rule, w in (("sync", sync_windows(rows, tid)), ("graph", graph_windows(rows, tid)))
        if len(w) >= MIN_STEPS
    ]

    def score(candidate: tuple[str, list]) -> tuple[float, bool]:
        rule, w = candidate
        return coverage(rows, w[0][0], w[-1][1]) - spread(w), rule == "sync"

    return max(candidates, key=score)
