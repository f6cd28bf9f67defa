"""The foreign-run figures computed again by brute force in Python over the raw rows of an nsys
export, independently of the SQL: GPU ops matched to their CUDA call by (correlationId, globalPid),
each step's ops those launched in its host window, the busy union and the idle gaps by sorting, the
host's activity by looking at every interval open at an instant.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path

BLOCKING_NAME = re.compile(r"^cu(da)?(Device|Ctx|Stream|Event)Synchronize")
SYNC_MEMCPY = re.compile(r"^cu(da)?Memcpy(2D|3D|DtoH|HtoD|DtoD|AtoH|HtoA)?(_v\d+)?$")
POLL = re.compile(r"^cu(da)?(EventQuery|StreamQuery|StreamWaitEvent)")


@dataclass
class Raw:
    calls: list[dict]  # tid, pid, start, end, corr, name
    ops: list[dict]  # op, start, end, pid, corr, graph, copy_kind, src, dst, bytes, name
    sync_types: dict  # (pid, corr) -> syncType
    ranges: list[dict]  # tid, start, end, name (push/pop, any domain)
    os_calls: list[dict]  # tid, start, end, name


def load(path: Path, pid: int | None = None, device: int | None = None) -> Raw:
    db = sqlite3.connect(path)
    db.row_factory = sqlite3.Row
    names = dict(db.execute("SELECT id, value FROM StringIds").fetchall())
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}

    def rows(table: str) -> list[sqlite3.Row]:
        return db.execute(f"SELECT * FROM {table}").fetchall() if table in tables else []

    def mine(global_pid: int, dev: int | None = None) -> bool:
        return (pid is None or global_pid == pid) and (
            device is None or dev is None or dev == device
        )

    calls = [
        dict(
            tid=r["globalTid"],
            pid=r["globalTid"] - r["globalTid"] % 16777216,
            start=r["start"],
            end=r["end"],
            corr=r["correlationId"],
            name=names[r["nameId"]],
        )
        for r in rows("CUPTI_ACTIVITY_KIND_RUNTIME")
    ]
    calls = [c for c in calls if mine(c["pid"])]
    ops = []
    for r in rows("CUPTI_ACTIVITY_KIND_GRAPH_TRACE"):  # a replay traced whole: one op
        if mine(r["globalPid"], r["deviceId"]):
            ops.append(dict(op="graph", start=r["start"], end=r["end"], pid=r["globalPid"],
                            corr=r["correlationId"], graph=True, copy_kind=None, src=None,
                            dst=None, bytes=None, name=f"CUDA graph {r['graphId']}"))  # fmt: skip
    for table, op in (
        ("CUPTI_ACTIVITY_KIND_KERNEL", "kernel"),
        ("CUPTI_ACTIVITY_KIND_MEMCPY", "memcpy"),
        ("CUPTI_ACTIVITY_KIND_MEMSET", "memset"),
    ):
        for r in rows(table):
            if not mine(r["globalPid"], r["deviceId"]):
                continue
            keys = r.keys()
            ops.append(
                dict(
                    op=op,
                    start=r["start"],
                    end=r["end"],
                    pid=r["globalPid"],
                    corr=r["correlationId"],
                    graph=r["graphNodeId"] is not None,
                    copy_kind=r["copyKind"] if "copyKind" in keys else None,
                    src=r["srcKind"] if "srcKind" in keys else None,
                    dst=r["dstKind"] if "dstKind" in keys else None,
                    bytes=r["bytes"] if "bytes" in keys else None,
                    name=names.get(r["shortName"]) if op == "kernel" else op,
                )
            )
    sync_types = {
        (r["globalPid"], r["correlationId"]): r["syncType"]
        for r in rows("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")
    }
    ranges = [
        dict(
            tid=r["globalTid"],
            start=r["start"],
            end=r["end"],
            name=names.get(r["textId"]) if r["textId"] is not None else r["text"],
        )
        for r in rows("NVTX_EVENTS")
        if r["eventType"] == 59
        and r["end"] is not None
        and mine(r["globalTid"] - r["globalTid"] % 16777216)
    ]
    os_calls = [
        dict(tid=r["globalTid"], start=r["start"], end=r["end"], name=names[r["nameId"]])
        for r in rows("OSRT_API")
        if r["end"] > r["start"]
    ]
    return Raw(calls, ops, sync_types, ranges, os_calls)


def launching_call(raw: Raw) -> dict:
    """(pid, corr) -> the CUDA call that launched ops with that correlation id."""
    return {(c["pid"], c["corr"]): c for c in raw.calls}


def union(intervals: list[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    """The union of intervals clipped to [lo, hi), as disjoint sorted intervals."""
    merged: list[list[int]] = []
    for s, e in sorted(intervals):
        s, e = max(s, lo), min(e, hi)
        if e <= s:
            continue
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    return [(s, e) for s, e in merged]


def per_step(raw: Raw, windows: list[tuple[int, int]], gap_ns: int) -> list[dict]:
    """Per step: gpu_start, gpu_end, period, busy, kernel gaps and bubble (ns), and the idle
    gaps."""
    calls = launching_call(raw)
    step_of = []
    for o in raw.ops:
        c = calls.get((o["pid"], o["corr"]))
        step = next((k for k, (h0, h1) in enumerate(windows) if c and h0 <= c["start"] < h1), None)
        step_of.append(step)
    every = [(o["start"], o["end"]) for o in raw.ops]
    rows = []
    for k in range(len(windows)):
        mine = [o for o, s in zip(raw.ops, step_of, strict=True) if s == k]
        rows.append(
            dict(
                step=k,
                gpu_start=min(o["start"] for o in mine),
                gpu_end=max(o["end"] for o in mine),
                op_ns=sum(o["end"] - o["start"] for o in mine),
            )
        )
    for row, nxt in zip(rows, rows[1:] + [None], strict=True):
        if nxt is None:
            row.update(period=None, busy=None, gaps=[], kernel_gap=None, bubble=None)
            continue
        lo, hi = row["gpu_start"], nxt["gpu_start"]
        busy = union(every, lo, hi)
        edges = [lo] + [x for s, e in busy for x in (s, e)] + [hi]
        gaps = [
            (edges[i], edges[i + 1]) for i in range(0, len(edges), 2) if edges[i + 1] > edges[i]
        ]
        row.update(
            period=hi - lo,
            busy=sum(e - s for s, e in busy),
            gaps=gaps,
            kernel_gap=sum(e - s for s, e in gaps if e - s < gap_ns),
            bubble=sum(e - s for s, e in gaps if e - s >= gap_ns),
        )
    return rows


def innermost(intervals: list[dict], t: int) -> dict | None:
    """The latest-started interval open at t (of two starting together, the shorter)."""
    open_ = [i for i in intervals if i["start"] <= t < i["end"]]
    return max(open_, key=lambda i: (i["start"], -i["end"])) if open_ else None


def call_label(raw: Raw, call: dict) -> str:
    launched = [o for o in raw.ops if (o["pid"], o["corr"]) == (call["pid"], call["corr"])]
    if any(o["graph"] for o in launched):
        return "graph launch"
    if any(o["op"] == "kernel" for o in launched):
        return "kernel launch"
    copies = [o for o in launched if o["op"] == "memcpy"]
    if copies:
        return "memcpy " + {1: "HtoD", 2: "DtoH", 8: "DtoD", 10: "PtoP"}[copies[0]["copy_kind"]]
    if launched:
        return "memset"
    if re.match(r"^cu(da)?(EventQuery|StreamQuery)", call["name"]):
        return "query (poll)"
    if raw.sync_types.get((call["pid"], call["corr"])) in (1, 3, 4) or BLOCKING_NAME.match(
        call["name"]
    ):
        return "synchronize"
    if re.match(r"^cu(da)?GraphExec", call["name"]):
        return "graph-exec update"
    return re.sub(r"_v\d+$", "", call["name"])


def host_label(raw: Raw, tid: int, t: int) -> str:
    """What the engine thread was doing at t: its CUDA call, else OS call, else NVTX range, else
    nothing."""
    call = innermost([c for c in raw.calls if c["tid"] == tid], t)
    if call:
        return "cuda: " + call_label(raw, call)
    os_call = innermost([o for o in raw.os_calls if o["tid"] == tid], t)
    if os_call:
        return "os: " + os_call["name"]
    rng = innermost([r for r in raw.ranges if r["tid"] == tid], t)
    return "nvtx: " + rng["name"] if rng else "untraced host code"


def attribution(raw: Raw, tid: int, gaps: list[tuple[int, int]]) -> tuple[dict, dict]:
    """(began-in, time-weighted) idle ns per host label over the given idle intervals."""
    edges = sorted(
        {
            x
            for group in (raw.calls, raw.os_calls, raw.ranges)
            for i in group
            if i["tid"] == tid
            for x in (i["start"], i["end"])
        }
    )
    began: dict[str, int] = {}
    by_time: dict[str, int] = {}
    for s, e in gaps:
        label = host_label(raw, tid, s)
        began[label] = began.get(label, 0) + e - s
        cuts = [s] + [x for x in edges if s < x < e] + [e]
        for a, b in zip(cuts, cuts[1:], strict=False):
            label = host_label(raw, tid, a)
            by_time[label] = by_time.get(label, 0) + b - a
    return began, by_time


def blocking_rows(raw: Raw) -> list[dict]:
    """The sync inventory's rows: blocking calls, and DtoH or pageable copies (at their call)."""
    calls = launching_call(raw)
    rows = []
    for c in raw.calls:
        kind = raw.sync_types.get((c["pid"], c["corr"]))
        if not POLL.match(c["name"]) and (
            kind in (1, 3, 4) or BLOCKING_NAME.match(c["name"]) or SYNC_MEMCPY.match(c["name"])
        ):
            rows.append(dict(event="sync", tid=c["tid"], start=c["start"], api=c["name"]))
    for o in raw.ops:
        if o["op"] == "memcpy" and (o["copy_kind"] == 2 or o["src"] == 0 or o["dst"] == 0):
            c = calls[(o["pid"], o["corr"])]
            rows.append(
                dict(event="copy", tid=c["tid"], start=c["start"], api=c["name"], bytes=o["bytes"])
            )
    return sorted(rows, key=lambda r: (r["start"], r["event"]))
