"""Every figure `bubblelab analyze` gives for a foreign run, computed again by brute force from the
raw rows (tests/fixture_sqlite.py) and the definitions of profiling/README.md and
costmodel/foreign.py: per-step period, busy union, kernel gaps and bubble; steady state; how sure;
idle split and histogram; what the host was doing in each bubble gap; the sync inventory per steady
step; what pipelining would buy. Plain Python (numpy only for the bootstrap's random draws).
"""

from __future__ import annotations

import bisect
import heapq
import re
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import numpy as np

from tests.fixture_rows import sync_points
from tests.fixture_sqlite import DTOH, POLL, Call, Rows, engine_thread

PREFILL_RATIO, WARMUP, GAP_NS = 2.0, 5, 5000
LAYERS = {"cuda": "CUDA API", "os": "OS runtime", "nvtx": "NVTX range (untraced code in it)"}
BUCKETS = (0, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 10000)


@dataclass
class Step:
    step: int
    window: tuple[int, int]
    gpu_start: int
    gpu_end: int
    op_ns: int
    launches: int
    kind: str = "decode"
    timed: bool = False  # it has a period: a next step (the figures below are 0 when not)
    period: int = 0
    busy: int = 0
    gaps: list = field(default_factory=list)  # (start, end) idle between busy islands in the period
    kernel_gap: int = 0
    bubble: int = 0
    wait: int = 0


def step_of(windows: list[tuple[int, int]], t: int) -> int | None:
    k = bisect.bisect_right([s for s, _ in windows], t) - 1
    return k if k >= 0 and t < windows[k][1] else None


def union(ops: list[tuple[int, int]]) -> list[list[int]]:
    """Busy islands: ops merged while one starts no later than everything before it ended."""
    islands: list[list[int]] = []
    for s, e in sorted(ops):
        if islands and s <= islands[-1][1]:
            islands[-1][1] = max(islands[-1][1], e)
        else:
            islands.append([s, e])
    return islands


def step_graphs(rows: Rows, windows: list[tuple[int, int]]) -> dict[int, int]:
    """Step -> the graph of its largest replay (a graph named by its lowest node id; of replays as
    large, the lowest id)."""
    replays: dict[tuple[int, int], list[int]] = defaultdict(list)
    for o in rows.ops:
        k = step_of(windows, o.call.start) if o.call else None
        if k is not None and o.node is not None:
            replays[k, o.corr].append(o.node)
    largest: dict[int, tuple[int, int]] = {}
    for (k, _), nodes in replays.items():
        key = (len(nodes), -min(nodes))
        largest[k] = max(largest.get(k, key), key)
    return {k: -graph for k, (_, graph) in largest.items()}


def per_step(rows: Rows, windows: list[tuple[int, int]]) -> list[Step]:
    mine: dict[int, list] = defaultdict(list)
    for o in rows.ops:
        k = step_of(windows, o.call.start) if o.call else None
        if k is not None:
            mine[k].append(o)
    steps = [
        Step(
            k,
            windows[k],
            min(o.start for o in ops),
            max(o.end for o in ops),
            sum(o.end - o.start for o in ops),
            len({o.corr for o in ops}),
        )  # fmt: skip
        for k, ops in sorted(mine.items())
    ]
    op_median = statistics.median(s.op_ns for s in steps)
    launch_median = statistics.median(s.launches for s in steps)
    islands = union([(o.start, o.end) for o in rows.ops])
    island_starts = [s for s, _ in islands]
    graph_of = step_graphs(rows, windows)
    uses = Counter(graph_of.values())
    for s in steps:
        rare = s.step in graph_of and uses[graph_of[s.step]] * 2 * PREFILL_RATIO < max(
            uses.values()
        )
        if (
            s.op_ns > PREFILL_RATIO * op_median
            or s.launches > PREFILL_RATIO * launch_median
            or rare
        ):
            s.kind = "prefill"
    for s, nxt in zip(steps, steps[1:], strict=False):
        lo, hi = s.gpu_start, nxt.gpu_start
        s.timed, s.period = True, hi - lo
        first = max(0, bisect.bisect_right(island_starts, lo) - 1)
        inside = [(max(a, lo), min(b, hi)) for a, b in islands[first:] if a < hi]
        inside = [(a, b) for a, b in inside if b > a]
        s.busy = sum(b - a for a, b in inside)
        edges = [lo, *(x for a, b in inside for x in (a, b)), hi]
        s.gaps = [
            (edges[i], edges[i + 1]) for i in range(0, len(edges), 2) if edges[i + 1] > edges[i]
        ]
        s.kernel_gap = sum(b - a for a, b in s.gaps if b - a < GAP_NS)
        s.bubble = sum(b - a for a, b in s.gaps if b - a >= GAP_NS)
    for p in sync_points(rows, engine_thread(rows)):
        k = step_of(windows, p.start)
        if k is not None and k < len(steps):
            steps[k].wait += p.end - p.start
    return steps


def steady(steps: list[Step], warmup: int = WARMUP) -> list[Step]:
    """Decode steps followed by a decode step, with at least 1/PREFILL_RATIO of the median decode
    step's GPU busy time, minus the first `warmup` of them."""
    busy = statistics.median(s.busy for s in steps if s.kind == "decode" and s.timed)
    ok = [
        s
        for s, nxt in zip(steps, steps[1:], strict=False)
        if s.kind == nxt.kind == "decode" and s.busy * PREFILL_RATIO >= busy
    ]
    return ok[warmup:]


def quantile(values: list[float], q: float) -> float:
    """Linear interpolation between the closest ranks (pandas' and numpy's default)."""
    xs = sorted(values)
    pos = q * (len(xs) - 1)
    i = int(pos)
    return xs[i] + (xs[min(i + 1, len(xs) - 1)] - xs[i]) * (pos - i)


def call_label(rows: Rows, c: Call) -> str:
    if any(o.graph for o in c.ops):
        return "graph launch"
    if any(o.op == "kernel" for o in c.ops):
        return "kernel launch"
    copies = sorted(o.name for o in c.ops if o.op == "memcpy")
    if copies:
        return "memcpy " + copies[-1]
    if c.ops:
        return "memset"
    if re.match(r"^cu(da)?(EventQuery|StreamQuery)", c.name):
        return "query (poll)"
    blocks = rows.sync_types.get((c.pid, c.corr), set()) & {1, 3, 4}
    if blocks or re.match(r"^cu(da)?(Device|Ctx|Stream|Event)Synchronize", c.name):
        return "synchronize"
    if re.match(r"^cu(da)?GraphExec", c.name):
        return "graph-exec update"
    return re.sub(r"_v\d+$", "", c.name)


def innermost(intervals: list[tuple[int, int, str]]) -> tuple[list[int], list[str | None]]:
    """The latest-started open interval's label at every instant (of two starting together, the
    shorter), as a step function: (times, labels), label[i] holding from times[i]."""
    events = sorted({t for s, e, _ in intervals if e > s for t in (s, e)})
    by_start = sorted((s, -e, i) for i, (s, e, _) in enumerate(intervals) if e > s)
    heap: list = []
    times, labels, j = [], [], 0
    for t in events:
        while j < len(by_start) and by_start[j][0] <= t:
            s, neg_e, i = by_start[j]
            heapq.heappush(heap, (-s, -neg_e, i))  # latest start first, then the earliest end
            j += 1
        while heap and heap[0][1] <= t:  # closed: dropped once nothing later-started is open
            heapq.heappop(heap)
        times.append(t)
        labels.append(intervals[heap[0][2]][2] if heap else None)
    return times, labels


def host_labels(rows: Rows, tid: int) -> tuple[list[int], list[str]]:
    """What the thread was doing, as a step function: its innermost CUDA call, else OS call, else
    NVTX push/pop range, else untraced host code."""
    layers = {
        "cuda": innermost(
            [(c.start, c.end, call_label(rows, c)) for c in rows.calls if c.tid == tid]
        ),
        "os": innermost([(s, e, n) for t, s, e, n in rows.os_calls if t == tid]),
        "nvtx": innermost(
            [(s, e, n) for t, s, e, n, kind in rows.ranges if t == tid and kind == 59]
        ),
    }
    times = sorted({t for ts, _ in layers.values() for t in ts})
    labels = []
    for t in times:
        label = "untraced host code"
        for layer in ("nvtx", "os", "cuda"):  # the most specific open layer wins
            ts, ls = layers[layer]
            i = bisect.bisect_right(ts, t) - 1
            if i >= 0 and ls[i] is not None:
                label = f"{layer}: {ls[i]}"
        labels.append(label)
    return times, labels


def label_at(labels: tuple[list, list], t: int, default: str | None = "untraced host code"):
    """The step function's label at t."""
    i = bisect.bisect_right(labels[0], t) - 1
    return labels[1][i] if i >= 0 and labels[1][i] is not None else default


def attribution(rows: Rows, gaps: list[tuple[int, int]]) -> tuple[dict, dict, tuple]:
    """Bubble ns per label by the label open when each gap began, and per top-level layer by the
    label at each instant; and the label at each gap's start."""
    labels = host_labels(rows, engine_thread(rows))
    began: dict[str, int] = defaultdict(int)
    by_time: dict[str, int] = defaultdict(int)
    for s, e in gaps:
        began[label_at(labels, s)] += e - s
        i = bisect.bisect_right(labels[0], s)
        cuts = [s, *(t for t in labels[0][i : bisect.bisect_left(labels[0], e)]), e]
        for a, b in zip(cuts, cuts[1:], strict=False):
            by_time[layer(label_at(labels, a))] += b - a
    return dict(began), dict(by_time), labels


def layer(label: str) -> str:
    return LAYERS.get(label.split(": ", 1)[0], label) if ": " in label else label


def inventory(rows: Rows, windows: list[tuple[int, int]]) -> list[dict]:
    """Every host-blocking call and every DtoH or pageable copy (at its call), with its step, and
    for the engine thread's: whether it is part of its step's closing sync point, and flagged when
    inside a step but not closing it; `after`: the engine thread's last kernel launch before it."""
    tid = engine_thread(rows)
    points = sync_points(rows, tid)
    last_point: dict[int | None, int] = {}  # step -> its last point
    for n, p in enumerate(points):
        k = step_of(windows, p.start)
        if k is not None:
            last_point[k] = n
    point_starts = [p.start for p in points]
    first_kernel: dict[int, tuple[int, str]] = {}  # launch instant -> its first kernel to run
    for o in rows.ops:
        if o.op == "kernel" and o.call and o.call.tid == tid:
            at = o.call.start
            first_kernel[at] = min(first_kernel.get(at, (o.start, o.name)), (o.start, o.name))
    launch_starts = sorted(first_kernel)
    out: list[dict] = []

    def add(c: Call, event: str, detail: str, nbytes: int | None) -> None:
        k = step_of(windows, c.start)
        n = bisect.bisect_right(point_starts, c.start) - 1
        in_point = c.tid == tid and n >= 0 and c.start <= points[n].end
        closing = in_point and last_point.get(step_of(windows, points[n].start)) == n
        a = bisect.bisect_left(launch_starts, c.start) - 1
        out.append(dict(event=event, api=c.name, detail=detail, bytes=nbytes, step=k, start=c.start,
                        host_ns=c.end - c.start, engine=c.tid == tid, closing=closing,
                        flagged=k is not None and c.tid == tid and not closing,
                        after=first_kernel[launch_starts[a]][1] if a >= 0 else None))  # fmt: skip

    for c in rows.calls:
        if rows.blocks(c):
            kinds = rows.sync_types.get((c.pid, c.corr), set())
            names = {1: "event sync", 3: "stream sync", 4: "context sync"}
            detail = names.get(next(iter(kinds)), "blocking call") if len(kinds) == 1 else None
            add(c, "sync", detail or "blocking call", None)
        for o in c.ops:
            if o.op == "memcpy" and (o.copy_kind == DTOH or o.pageable):
                memory = "pageable" if o.pageable else "pinned"
                add(c, "copy", f"{o.name} {memory} {o.nbytes} B", o.nbytes)
    assert not any(POLL.match(r["api"]) and r["event"] == "sync" for r in out)
    return out


def sync_summary(rows_: list[dict], steady_steps: list[int], phase_of) -> dict:
    """(event, api, detail, closing, phase, after) -> count, per step, host ms per step, flagged."""
    n = len(steady_steps)
    chosen = set(steady_steps)
    table: dict[tuple, dict] = {}
    for r in rows_:
        if r["step"] not in chosen:
            continue
        phase = phase_of(r["start"]) if r["engine"] else None
        key = (r["event"], r["api"], r["detail"], r["closing"], phase or "outside any phase",
               r["after"] or "-")  # fmt: skip
        entry = table.setdefault(key, {"count": 0, "host_ns": 0, "flagged": False})
        entry["count"] += 1
        entry["host_ns"] += r["host_ns"]
        entry["flagged"] |= r["flagged"]
    return {
        k: {
            "count": v["count"],
            "per_step": v["count"] / n,
            "host_ms_per_step": v["host_ns"] / 1e6 / n,
            "flagged": v["flagged"],
        }  # fmt: skip
        for k, v in table.items()
    }


def _kind(o) -> str:
    return "graph" if o.graph else o.op


def launch_gaps(rows: Rows, timed: list[Step]) -> list[dict]:
    """profiling/sql/launch_handovers.sql by brute force: every gap of the timed steps that is a
    bubble or lies between two launches, with the kinds of op on either side (of several at one
    instant: the latest launched before, the earliest launched after, ties by correlation id; ops
    no call launched are not read), whether the op after was launched before the gap began, and
    whether the two came from different calls."""
    ending: dict[int, list] = defaultdict(list)
    starting: dict[int, list] = defaultdict(list)
    for o in rows.ops:
        ending[o.end].append(o)
        starting[o.start].append(o)

    def pick(ops: list, latest: bool):
        called = [o for o in ops if o.call]
        if not called:
            return None
        return (max if latest else min)(called, key=lambda o: (o.call.start, o.corr))

    out = []
    for s in timed:
        for a, b in s.gaps:
            before, after = pick(ending[a], True), pick(starting[b], False)
            who = [(o.pid, o.corr) if o else None for o in (before, after)]
            launched = [o.call.start for o in starting[b] if o.call]
            gap = {
                "step": s.step,
                "idle": b - a,
                "before": _kind(before) if before else None,
                "after": _kind(after) if after else None,
                "queued": bool(launched) and min(launched) < a,
                "bubble": b - a >= GAP_NS,
                "between": who[0] != who[1],
            }
            if gap["bubble"] or gap["between"]:
                out.append(gap)
    return out


def handover_ns(
    gaps: list[dict], steady_steps: list[Step], min_samples: int = 3
) -> tuple[float | None, dict[int, float]]:
    """costmodel/foreign_handover.py's hand-over: each late bubble gap priced at the median of the
    queued launches between the same kinds (else before the same kind, else all; each price from
    at least min_samples), never above the gap; queued bubble gaps kept whole. The samples: the
    steady steps' queued launches, or every step's where those are fewer than min_samples.
    (price of any launch, {step: its bubble as the GPU's own}); (None, {}) where none is queued."""
    chosen = {s.step for s in steady_steps}
    queued = [g for g in gaps if g["queued"] and g["between"]]
    sample = [g for g in queued if g["step"] in chosen]
    if len(sample) < min_samples:
        sample = queued
    if not sample:
        return None, {}

    def median_of(group: list[dict]) -> float | None:
        return statistics.median(g["idle"] for g in group) if len(group) >= min_samples else None

    def key(g: dict) -> tuple:
        return (g["before"] or "?", g["after"] or "?")

    anything = statistics.median(g["idle"] for g in sample)
    per_step: dict[int, float] = defaultdict(float)
    for g in gaps:
        if not g["bubble"]:
            continue
        price = median_of([x for x in sample if key(x) == key(g)])
        if price is None:
            price = median_of([x for x in sample if key(x)[1] == key(g)[1]])
        cost = g["idle"] if g["queued"] else min(g["idle"], anything if price is None else price)
        per_step[g["step"]] += cost
    return anything, per_step


def pipelining(
    steady_steps: list[Step],
    output_len: float,
    gaps: list[dict] | None = None,
    n_boot: int = 1000,
) -> dict:
    """costmodel/foreign.py's prediction: T_block = median period; T_pipe = median over steps of
    max(period - bubble + its hand-over (handover_ns), period - wait); speedup = T_block / T_pipe x
    (1 - 1/L); the interval resamples the steps (numpy's generator, seed 0) with z = 1/L low and
    z = 0 high."""
    tau, added = handover_ns(gaps or [], steady_steps)
    period = np.array([s.period / 1e6 for s in steady_steps])
    gpu = np.array([(s.period - s.bubble + added.get(s.step, 0.0)) / 1e6 for s in steady_steps])
    host = np.array([max(0.0, s.period / 1e6 - s.wait / 1e6) for s in steady_steps])
    pipe = np.maximum(gpu, host)
    z = 1.0 / output_len
    picks = np.random.default_rng(0).integers(0, len(period), size=(n_boot, len(period)))
    boot_block, boot_pipe = np.median(period[picks], axis=1), np.median(pipe[picks], axis=1)
    t_block, t_pipe = statistics.median(period.tolist()), statistics.median(pipe.tolist())
    return {
        "speedup_pct": round((t_block / t_pipe * (1 - z) - 1) * 100, 3),
        "interval_pct": [
            round(float(np.percentile((boot_block / boot_pipe * (1 - z) - 1) * 100, 2.5)), 3),
            round(float(np.percentile((boot_block / boot_pipe - 1) * 100, 97.5)), 3),
        ],
        "t_block_ms": round(t_block, 6),
        "t_pipe_ms": round(t_pipe, 6),
        "handover_ms": None if tau is None else round(tau / 1e6, 6),
    }


def histogram(gaps: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """(lower edge us, gaps, kernel gaps) per bucket holding any."""
    counts: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for s, e in gaps:
        lo = BUCKETS[bisect.bisect_right(BUCKETS, (e - s) / 1e3) - 1]
        counts[lo][0] += 1
        counts[lo][1] += e - s < GAP_NS
    return [(lo, n, k) for lo, (n, k) in sorted(counts.items())]
