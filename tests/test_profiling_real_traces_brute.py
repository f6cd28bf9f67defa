"""The committed H200 traces' per-step rows and bubble attribution recomputed by brute force over
the raw SQLite rows (NVTX ranges, CUDA calls and GPU activity, matched by correlation id in
Python), independently of the SQL, for the steps tests/test_profiling_real_traces.py pins."""

from __future__ import annotations

import gzip
import shutil
import sqlite3
from pathlib import Path

import pytest

from bubblelab.profiling import analysis
from bubblelab.profiling.catalog import connect
from bubblelab.profiling.ingest import ingest
from tests.test_profiling_real_traces import EXPECTED, NAMES, TRACES


@pytest.fixture(scope="module")
def catalog():
    con = connect(None)
    return con, {name: ingest(TRACES / name, None, {}, con=con) for name in NAMES}


# -- brute force over the raw export ---------------------------------------------------------------
def union(intervals: list[tuple[int, int]]) -> int:
    total, reach = 0, None
    for start, end in sorted(intervals):
        start = start if reach is None else max(start, reach)
        if end > start:
            total += end - start
        reach = end if reach is None else max(reach, end)
    return total


def clip(intervals: list[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    return [(max(s, lo), min(e, hi)) for s, e in intervals if min(e, hi) > max(s, lo)]


class RawTrace:
    """The engine thread's ranges and every GPU op, by the correlation id of its launching call (a
    graph launch's kernels all carry the launch's id)."""

    def __init__(self, path: Path):
        db = sqlite3.connect(path)
        names = dict(db.execute("SELECT id, value FROM StringIds"))
        domain = db.execute(
            "SELECT domainId FROM NVTX_EVENTS WHERE eventType = 75 AND text = 'bubblelab'"
        ).fetchone()
        ranges = [
            (s, e, names.get(t, text), k, tid)
            for s, e, t, text, k, tid in db.execute(
                "SELECT start, end, textId, text, int64Value, globalTid FROM NVTX_EVENTS "
                "WHERE eventType = 59 AND domainId = ? AND end > start",
                domain,
            )
        ]
        tids = [r[4] for r in ranges]
        self.engine = max(set(tids), key=tids.count)
        self.ranges = [r[:4] for r in ranges if r[4] == self.engine]
        self.calls = db.execute(
            "SELECT start, correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE globalTid = ?",
            [self.engine],
        ).fetchall()
        self.ops: dict[int, list[tuple[int, int, int]]] = {}
        for table in ("KERNEL", "MEMCPY", "MEMSET"):
            for start, end, stream, corr in db.execute(
                f"SELECT start, end, streamId, correlationId FROM CUPTI_ACTIVITY_KIND_{table}"
            ):
                self.ops.setdefault(corr, []).append((start, end, stream))
        db.close()

    def innermost(self, t: int) -> str:
        open_ranges = [(s, -e, name) for s, e, name, _ in self.ranges if s <= t < e]
        return max(open_ranges)[2] if open_ranges else "outside any phase"

    def launches_under(
        self, phases: tuple[str, ...], step: int
    ) -> list[tuple[int, list[tuple[int, int, int]]]]:
        """(call start, its GPU ops) of each call made inside a range of these phases for this step
        that launched GPU work (childless phases)."""
        windows = [(s, e) for s, e, name, k in self.ranges if name in phases and k == step]
        return [
            (t, self.ops[c])
            for t, c in self.calls
            if c in self.ops and any(s <= t < e for s, e in windows)
        ]

    def ops_under(self, phases: tuple[str, ...], step: int) -> list[tuple[int, int, int]]:
        return [op for _, ops in self.launches_under(phases, step) for op in ops]

    def step(self, step: int) -> dict:
        forward = self.ops_under(("forward", "prefill"), step)
        launches = self.launches_under(("sampling",), step)
        sampling = [op for _, ops in launches for op in ops]
        f0, f1 = min(o[0] for o in forward), max(o[1] for o in forward)
        # sampling starts when the GPU could start it: forward end or launch call, never after its
        # first op
        s0 = min(min(o[0] for o in sampling), max(f1, min(t for t, _ in launches)))
        s1 = max(o[1] for o in sampling)
        p1 = min(o[0] for o in self.ops_under(("forward", "prefill"), step + 1))
        spans = sorted([(f0, f1), (s0, s1)])
        idle, reach = [], f0  # the period [f0, p1) minus both spans
        for s, e in spans + [(p1, p1)]:
            if s > reach:
                idle.append((reach, s))
            reach = max(reach, e)
        busy = union(clip([o[:2] for ops in self.ops.values() for o in ops], f0, p1))
        kernel_gap = (f1 - f0 - union([o[:2] for o in forward])) + (
            s1 - s0 - union([o[:2] for o in sampling])
        )
        began: dict[str, int] = {}
        for s, e in idle:
            began[self.innermost(s)] = began.get(self.innermost(s), 0) + e - s
        return {
            "row": dict(
                forward_ms=f1 - f0,
                sampling_ms=s1 - s0,
                bubble_ms=sum(e - s for s, e in idle),
                kernel_gap_ms=kernel_gap,
                period_ms=p1 - f0,
                busy_ms=busy,
            ),
            "began": began,
        }


@pytest.mark.parametrize("name", NAMES)
def test_brute_force_agrees(catalog, name, tmp_path):
    con, runs = catalog
    plain = tmp_path / "trace.sqlite"
    with gzip.open(TRACES / name) as src, plain.open("wb") as dst:
        shutil.copyfileobj(src, dst)
    raw = RawTrace(plain)
    steps = analysis.per_step(con, runs[name]).set_index("step")
    pinned, _ = EXPECTED[name]["row"]
    for step in (pinned, pinned + 1, EXPECTED[name]["steady"][0]):
        expected = raw.step(step)
        row = steps.loc[step]
        assert {c: round(row[c] * 1e6) for c in expected["row"]} == expected["row"]
        table = analysis.attribution(con, runs[name], steps.loc[[step]].reset_index())
        began = {r.phase: round(r.began_ms * 1e6) for r in table.itertuples() if r.began_ms}
        assert began == expected["began"]
