"""The committed foreign fixtures read again by brute force: the steps found from their raw rows
(tests/fixture_sqlite.py) by the rules profiling/README.md states ("Finding the steps"), without any
of the SQL (tests/test_foreign_fixtures.py compares every figure with the analysis).

Sorting and bisecting only, so a trace of 100,000 kernels and CUDA calls reads in about a second;
tests/foreign_brute_force.py is the quadratic version for the small synthetic traces.
"""

from __future__ import annotations

import bisect
import math
import re
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass

from tests.fixture_sqlite import DTOH, Rows, engine_thread, launch_times

MIN_STEPS, SPLIT_RATIO, GRAPH_SHARE = 3, 4.0, 0.5  # the constants profiling/README.md names
READ_SHARE, REPEAT, AGREE, SCORE_TIE = 0.9, 0.05, (0.02, 0.05), 0.05  # and the evidence's
PRIORITY = ("nvtx", "sync", "graph", "pause")


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


def last_window(launches: list[int], start: int) -> list[tuple[int, int]]:
    """A rule's last step: from its last boundary to the last launch."""
    return [(start, max(launches[-1] + 1, start))]


def sync_windows(rows: Rows, tid: int) -> list[tuple[int, int]]:
    closing = closing_points(sync_points(rows, tid))
    if not closing:
        return []
    launches = launch_times(rows)
    ends = [p.end for p in closing]
    starts = [launches[0] if launches else ends[0], *ends[:-1]]
    windows = list(zip(starts, ends, strict=True)) + last_window(launches, ends[-1])
    return with_work(windows, launches)


def graph_windows(rows: Rows, tid: int) -> list[tuple[int, int]]:
    """From one replay of the largest graphs to the next."""
    replays = Counter(
        (o.call.start, o.corr) for o in rows.ops if o.graph and o.call and o.call.tid == tid
    )
    if not replays:
        return []
    biggest = max(replays.values())
    big = sorted(start for (start, _), n in replays.items() if n >= GRAPH_SHARE * biggest)
    launches = launch_times(rows)
    windows = list(zip(big, big[1:], strict=False)) + last_window(launches, big[-1])
    return with_work(windows, launches)


def pause_windows(rows: Rows, tid: int) -> list[tuple[int, int]]:
    """From each launch after a long pause of the engine thread to the next: the highest cut above
    a >= SPLIT_RATIO jump in the sorted pauses whose steps hold the same number of launches most
    often. A launch here is a call that launched something other than a device-to-host copy."""
    calls = sorted(
        (c.start, c.end)
        for c in rows.calls
        if c.tid == tid and any(not (o.op == "memcpy" and o.copy_kind == DTOH) for o in c.ops)
    )
    pauses, reach = [math.inf], calls[0][1] if calls else 0
    for s, e in calls[1:]:
        pauses.append(max(s - reach, 1000))
        reach = max(reach, e)
    known = sorted({math.log(p) for p in pauses if p != math.inf})
    cuts = [math.exp(b) for a, b in zip(known, known[1:], strict=False) if b - a >= math.log(4)]
    for cut in reversed(cuts):
        opens = [k for k, p in enumerate(pauses) if p >= cut * (1 - 1e-9)]
        between = Counter(b - a - 1 for a, b in zip(opens, opens[1:], strict=False))
        if len(opens) >= MIN_STEPS and max(between.values()) >= 0.5 * sum(between.values()):
            launches = launch_times(rows)
            starts = [calls[k][0] for k in opens]
            windows = list(zip(starts, starts[1:], strict=False)) + last_window(
                launches, starts[-1]
            )
            return with_work(windows, launches)
    return []


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


@dataclass
class Candidate:
    """One rule's steps and the evidence for them (profiling/evidence.py's definitions)."""

    rule: str
    windows: list[tuple[int, int]]
    coverage: float = 0.0
    spread: float = 0.0
    read_share: float = 0.0
    repeat_share: float = 0.0

    @property
    def steps(self) -> int:
        return len(self.windows)

    @property
    def window_ms(self) -> float:
        return statistics.median(e - s for s, e in self.windows) / 1e6

    @property
    def support(self) -> tuple[bool, bool]:
        return self.read_share >= READ_SHARE, self.repeat_share >= READ_SHARE


def measure(rows: Rows, rule: str, windows: list[tuple[int, int]]) -> Candidate:
    launches = launch_times(rows)
    reads = sorted(o.call.start for o in rows.ops if o.call and o.copy_kind == DTOH)

    def held(times: list[int], w: tuple[int, int]) -> int:
        return bisect.bisect_left(times, w[1]) - bisect.bisect_left(times, w[0])

    whole = windows[:-1] if len(windows) > 1 else windows
    calls = [held(launches, w) for w in whole]
    middle = calls[len(calls) // 4 : max(3, len(calls) - len(calls) // 4)]
    modal = max(sorted(set(middle)), key=middle.count)
    return Candidate(
        rule,
        windows,
        coverage(rows, windows[0][0], windows[-1][1]),
        spread(windows),
        sum(held(reads, w) > 0 for w in whole) / len(whole),
        sum(abs(n - modal) <= REPEAT * modal for n in middle) / len(middle),
    )


def agree(a: Candidate, b: Candidate) -> bool:
    steps, window = AGREE
    return abs(a.steps - b.steps) <= max(2, steps * max(a.steps, b.steps)) and abs(
        a.window_ms - b.window_ms
    ) <= window * max(a.window_ms, b.window_ms)


def candidates(rows: Rows, step_range: str | None = None) -> list[Candidate]:
    """Every rule's steps (MIN_STEPS or more) with their evidence; the named range first."""
    tid = engine_thread(rows)
    found = [("sync", sync_windows(rows, tid)), ("graph", graph_windows(rows, tid)),
             ("pause", pause_windows(rows, tid))]  # fmt: skip
    if step_range:
        found.insert(0, ("nvtx", range_windows(rows, step_range)))
    return [measure(rows, rule, w) for rule, w in found if len(w) >= MIN_STEPS]


def choose(found: list[Candidate], step_range: str | None = None) -> Candidate:
    """The named range; else the rule closed by reads, best scoring, or the first of PRIORITY of
    those as well closed that agree with it and score about as well."""
    if step_range:
        return found[0]
    best = max(found, key=lambda c: (c.support[0], c.coverage - c.spread))
    same = [
        c
        for c in found
        if c is best
        or (
            agree(c, best)
            and c.support[0] == best.support[0]
            and c.coverage - c.spread >= best.coverage - best.spread - SCORE_TIE
        )
    ]
    return min(same, key=lambda c: PRIORITY.index(c.rule))


def sure(found: list[Candidate], chosen: Candidate) -> bool:
    """An independent cross-check holds (another rule agrees, the steps end in reads for a rule not
    looking for them, they repeat for the sync rule) and no other rule as well supported finds
    other steps."""
    others = [c for c in found if c is not chosen]
    checked = (
        any(agree(c, chosen) for c in others)
        or (chosen.rule != "sync" and chosen.support[0])
        or (chosen.rule == "sync" and chosen.support[1])
    )
    doubted = any(not agree(c, chosen) and c.support >= chosen.support for c in others)
    return checked and not doubted
