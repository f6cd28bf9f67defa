"""The per-rank tables of a tensor-parallel trace (profiling/ranks.py) computed again by brute force
in plain Python over the raw SQLite rows, from the definitions the SQL states (tp_assign_ranks,
tp_rank_steps, comm_vs_compute, split_rank_steps, tp_straggler, tp_skew, tp_per_rank, and
per_step / step_spans for our own steps), none of the SQL itself. The tables across ranks
(tp_straggler, tp_skew, tp_per_rank) are tests/rank_brute_force_across.py.

A rank's table is {step: row}, each row holding times in integer ns under the analysis's column
names with `_ms` read as `_ns` (forward_ns for forward_ms), and the absolute times (forward_start,
...) as they are. The raw rows come from tests/fixture_sqlite.py (CUDA calls and GPU ops, matched by
correlation id); a foreign process's steps and per-step figures from tests/fixture_rows.py's rules
and tests/fixture_figures.py.
"""

from __future__ import annotations

import re
import sqlite3
from collections import defaultdict
from pathlib import Path

from tests import fixture_figures as ff
from tests.fixture_rows import candidates, choose
from tests.fixture_sqlite import Op, Rows
from tests.foreign_brute_force import innermost, union

COMM = re.compile("nccl", re.IGNORECASE)  # NCCL's collectives by name
DOMAIN = "bubblelab"
FORWARD, SAMPLING = ("forward", "prefill"), ("sampling",)
PROCESS = 1 << 24  # a globalTid is the globalPid plus the thread's number below this

Table = dict[int, dict]  # one rank: step -> row
SPAN_KEYS = (
    "forward_start", "forward_end", "sampling_start", "sampling_end", "gpu_start", "gpu_end",
    "period_ns", "bubble_ns", "busy_ns",
)  # fmt: skip
COMM_KEYS = ("compute_ns", "comm_ns", "comm_exposed_ns", "comm_kernels")


# -- which process is which rank -------------------------------------------------------------------
def process_devices(path: Path) -> dict[int, int]:
    """pid -> the one GPU its kernels ran on (each process of these traces drives one GPU)."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    pairs = db.execute(
        "SELECT DISTINCT globalPid, deviceId FROM CUPTI_ACTIVITY_KIND_KERNEL"
    ).fetchall()
    db.close()
    assert len({pid for pid, _ in pairs}) == len(pairs), "a process on two GPUs"
    return dict(pairs)


def of_process(rows: Rows, pid: int) -> Rows:
    """The rows of one process (its calls keep their ops: correlation ids are per process)."""
    return Rows(
        [c for c in rows.calls if c.pid == pid],
        [o for o in rows.ops if o.pid == pid],
        rows.sync_types,
        [r for r in rows.ranges if r[0] - r[0] % PROCESS == pid],
        [o for o in rows.os_calls if o[0] - o[0] % PROCESS == pid],
    )


def our_ranks(path: Path) -> list[int]:
    """Our processes in rank order: the one with `plan` ranges first (rank 0 plans), then the
    others by GPU (a worker of rank r runs on the r-th GPU past rank 0's)."""
    devices = process_devices(path)
    plans = {pid for pid in devices if any(r["name"] == "plan" for r in our_ranges(path, pid))}
    assert len(plans) == 1
    return sorted(devices, key=lambda pid: (pid not in plans, devices[pid], pid))


# -- our own ranges --------------------------------------------------------------------------------
def our_ranges(path: Path, pid: int) -> list[dict]:
    """The process's push/pop ranges of domain `bubblelab` (the domain's id is per process), each
    with its step (the payload)."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    names = dict(db.execute("SELECT id, value FROM StringIds"))
    domains = {
        d
        for d, tid in db.execute(
            "SELECT domainId, globalTid FROM NVTX_EVENTS WHERE eventType = 75 AND text = ?",
            [DOMAIN],
        )
        if tid - tid % PROCESS == pid
    }
    ranges = [
        dict(tid=tid, start=s, end=e, name=names.get(t, text), step=payload(a, b, c, d))
        for tid, s, e, t, text, dom, a, b, c, d in db.execute(
            'SELECT globalTid, start, "end", textId, text, domainId, int64Value, uint64Value, '
            'int32Value, uint32Value FROM NVTX_EVENTS WHERE eventType = 59 AND "end" IS NOT NULL'
        )
        if dom in domains and tid - tid % PROCESS == pid
    ]
    db.close()
    return ranges


def step_marks(path: Path, pid: int) -> dict[int, tuple[str | None, int | None]]:
    """step -> (kind, batch size) from the process's latest `kind=... bs=...` mark of the step."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    names = dict(db.execute("SELECT id, value FROM StringIds"))
    domains = {
        (d, tid - tid % PROCESS)
        for d, tid in db.execute(
            "SELECT domainId, globalTid FROM NVTX_EVENTS WHERE eventType = 75 AND text = ?",
            [DOMAIN],
        )
    }
    latest: dict[int, tuple[int, str]] = {}
    for tid, s, t, text, dom, a, b, c, d in db.execute(
        "SELECT globalTid, start, textId, text, domainId, int64Value, uint64Value, int32Value, "
        "uint32Value FROM NVTX_EVENTS WHERE eventType = 34"
    ):
        message = names.get(t, text) or ""
        if tid - tid % PROCESS == pid and (dom, pid) in domains and message.startswith("kind="):
            step = payload(a, b, c, d)
            if step is not None and (step not in latest or s > latest[step][0]):
                latest[step] = (s, message)
    db.close()
    out = {}
    for step, (_, message) in latest.items():
        kind, size = re.search(r"kind=(\w+)", message), re.search(r"bs=(\d+)", message)
        out[step] = (kind and kind[1], size and int(size[1]))
    return out


def payload(*values: int | None) -> int | None:
    return next((v for v in values if v is not None), None)


# -- one rank's table ------------------------------------------------------------------------------
def span_union(intervals: list[tuple[int, int]], lo: int, hi: int) -> int:
    """Length of the union of intervals within [lo, hi)."""
    return sum(e - s for s, e in union(intervals, lo, hi))


def length(intervals: list[tuple[int, int]]) -> int:
    return span_union(intervals, min(s for s, _ in intervals), max(e for _, e in intervals))


def collectives(kernels: list[Op]) -> dict:
    """comm_vs_compute's figures of one step's kernels: each class's union, the collectives' time
    with no compute kernel beside it, how many collectives ran."""
    comm = [(o.start, o.end) for o in kernels if COMM.search(o.name)]
    compute = [(o.start, o.end) for o in kernels if not COMM.search(o.name)]
    busy = length(comm + compute)
    compute_ns = length(compute) if compute else 0
    return dict(
        compute_ns=compute_ns,
        comm_ns=length(comm) if comm else 0,
        comm_exposed_ns=busy - compute_ns,
        comm_kernels=len(comm),
    )


def our_table(rows: Rows, ranges: list[dict], marks: dict) -> Table:
    """One of our processes' rows of tp_rank_steps.sql: each GPU op belongs to the phase and step
    of the innermost range open on its launching call's thread when the call began."""
    by_tid: dict[int, list[dict]] = defaultdict(list)
    for r in ranges:
        if r["end"] > r["start"]:  # an empty range holds no call
            by_tid[r["tid"]].append(r)
    placed: dict[int, list[tuple[Op, str, int]]] = defaultdict(list)  # step -> (op, phase, call)
    for o in rows.ops:
        if o.call is None:
            continue
        inner = innermost(by_tid.get(o.call.tid, []), o.call.start)
        if inner is not None and inner["step"] is not None:
            placed[inner["step"]].append((o, inner["name"], o.call.start))
    host: dict[int, list[dict]] = defaultdict(list)
    for r in ranges:
        if r["step"] is not None:
            host[r["step"]].append(r)
    table: Table = {}
    for step in sorted(set(placed) | set(host)):
        ops = placed.get(step, [])
        forward = [o for o, phase, _ in ops if phase in FORWARD]
        sampling = [(o, at) for o, phase, at in ops if phase in SAMPLING]
        row: dict = dict(step=step, kind=None, batch_size=None, **dict.fromkeys(SPAN_KEYS))
        row["kind"], row["batch_size"] = marks.get(step, (None, None))
        if forward:
            row["forward_start"] = min(o.start for o in forward)
            row["forward_end"] = max(o.end for o in forward)
        if sampling:
            first = min(o.start for o, _ in sampling)
            launched = min(at for _, at in sampling)
            # the GPU could start sampling at the forward's end or at its launch call, whichever
            # came later, never after its first op
            ready = max(row["forward_end"] if forward else first, launched)
            row["sampling_start"] = min(first, ready)
            row["sampling_end"] = max(o.end for o, _ in sampling)
        row["forward_ns"] = span(row, "forward")
        row["sampling_ns"] = span(row, "sampling")
        if ops:
            first = min(o.start for o, _, _ in ops)  # the step's first op when it has no forward
            row["gpu_start"] = first if row["forward_start"] is None else row["forward_start"]
            row["gpu_end"] = max(o.end for o, _, _ in ops)
        kernels = [o for o, phase, _ in ops if o.op == "kernel" and phase in FORWARD + SAMPLING]
        row.update(collectives(kernels) if kernels else dict.fromkeys(COMM_KEYS))
        mine = host.get(step, [])
        for name in ("launch", "finalize"):
            named = [r for r in mine if r["name"] == name]
            row[f"{name}_start"] = min((r["start"] for r in named), default=None)
            row[f"{name}_end"] = max((r["end"] for r in named), default=None)
            row[f"{name}_ns"] = sum(r["end"] - r["start"] for r in named)
        for name in ("handoff", "recv"):
            named = [r["end"] - r["start"] for r in mine if r["name"] == name]
            row[f"{name}_ns"] = sum(named) if named else None
        table[step] = row
    timed = [table[s] for s in sorted(placed)]  # periods run between steps that put work on the GPU
    every = [(o.start, o.end) for o in rows.ops]
    for row, nxt in zip(timed, timed[1:] + [None], strict=True):
        if nxt is None:
            continue
        p0, p1 = row["gpu_start"], nxt["gpu_start"]
        row["period_ns"] = p1 - p0
        parts = [
            (row[f"{p}_start"], row[f"{p}_end"])
            for p in ("forward", "sampling")
            if row[f"{p}_start"] is not None
        ]
        row["bubble_ns"] = p1 - p0 - span_union(parts, p0, p1)  # the period outside both spans
        row["busy_ns"] = span_union(every, p0, p1)
    return table


def span(row: dict, part: str) -> int:
    start, end = row[f"{part}_start"], row[f"{part}_end"]
    return 0 if start is None else end - start


# -- another engine's process ----------------------------------------------------------------------
def foreign_steps(rows: Rows) -> tuple[str, list[tuple[int, int]]]:
    """The rule tests/fixture_rows.py's reading of profiling/steps.py picks, and its windows."""
    chosen = choose(candidates(rows))
    return chosen.rule, chosen.windows


def foreign_table(rows: Rows, windows: list[tuple[int, int]]) -> Table:
    """A foreign process's per-step rows (tests/fixture_figures.py) as split_rank_steps.sql reads
    them: its GPU span stands for the forward and its end for the step's end; every kernel of the
    step counts toward compute and communication (another engine has no phases)."""
    kernels: dict[int, list[Op]] = defaultdict(list)
    for o in rows.ops:
        k = ff.step_of(windows, o.call.start) if o.call else None
        if k is not None and o.op == "kernel":
            kernels[k].append(o)
    table: Table = {}
    for s in ff.per_step(rows, windows):
        row = dict(step=s.step, kind=s.kind, batch_size=None, gpu_start=s.gpu_start)
        row.update(gpu_end=s.gpu_end, forward_start=s.gpu_start, forward_end=s.gpu_end)
        row.update(sampling_start=None, sampling_end=s.gpu_end)
        row.update(launch_start=None, launch_end=None, finalize_start=None, finalize_end=None)
        row.update(launch_ns=None, finalize_ns=None, handoff_ns=None, recv_ns=None)
        row["sampling_ns"] = None
        if s.timed:
            row.update(period_ns=s.period, bubble_ns=s.bubble, busy_ns=s.busy)
            row["forward_ns"] = s.period - s.bubble
        else:  # the last step: no next one, no period; its forward is its ops' span
            row.update(period_ns=None, bubble_ns=None, busy_ns=None)
            row["forward_ns"] = s.gpu_end - s.gpu_start
        mine = kernels.get(s.step, [])
        row.update(collectives(mine) if mine else dict.fromkeys(COMM_KEYS))
        table[s.step] = row
    return table


def overlap(a: dict, b: dict) -> int:
    return min(a["gpu_end"], b["gpu_end"]) - max(a["gpu_start"], b["gpu_start"])


def match_steps(lead: Table, rank: Table) -> dict[int, int]:
    """own step -> rank 0's step: the rank-0 step whose GPU span it overlaps most; of several of
    the rank's steps on one rank-0 step, the one overlapping most (then the lower). Steps without
    GPU time are not matched."""
    timed = {k: r for k, r in rank.items() if r["gpu_end"] > r["gpu_start"]}
    leaders = {k: r for k, r in lead.items() if r["gpu_end"] > r["gpu_start"]}
    best: dict[int, tuple[int, int]] = {}  # own step -> (overlap, rank-0 step)
    for own, r in timed.items():
        shared = [(overlap(r, lead0), k) for k, lead0 in leaders.items() if overlap(r, lead0) > 0]
        if shared:
            most = max(n for n, _ in shared)
            (step,) = [k for n, k in shared if n == most]  # a tie would make the match arbitrary
            best[own] = (most, step)
    kept: dict[int, int] = {}
    for step in {s for _, s in best.values()}:
        mine = [(-n, own) for own, (n, s) in best.items() if s == step]
        kept[min(mine)[1]] = step
    return kept


def split_table(tables: list[Table]) -> list[Table]:
    """Each rank's table keyed by rank 0's step (split_rank_steps.sql): the rank's own rows, with
    own_step their own number and rank 0's kind."""
    lead = tables[0]
    out = []
    for table in tables:
        matched = match_steps(lead, table)
        out.append(
            {
                step: {**table[own], "step": step, "own_step": own, "kind": lead[step]["kind"]}
                for own, step in matched.items()
            }
        )
    return out
