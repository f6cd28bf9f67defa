"""Every profiling query on the committed H200 traces (traces/*.sqlite.gz), with exact expected
values (the issue: "CI tests run every query on the committed traces with exact expected values").

The values were computed once by the queries and pinned (tests/pin_real_traces.py rewrites the
table). The per-step rows and the bubble attribution of a few steps are also recomputed here by
brute force over the raw SQLite rows (NVTX ranges, CUDA calls and GPU activity, matched by
correlation id in Python), independently of the SQL.
"""

from __future__ import annotations

import gzip
import shutil
import sqlite3
from pathlib import Path

import pytest

from bubblelab.profiling import analysis
from bubblelab.profiling.catalog import connect
from bubblelab.profiling.ingest import ingest

TRACES = Path(__file__).parents[1] / "traces"
MEDIAN_COLUMNS = ("forward_ms", "sampling_ms", "bubble_ms", "kernel_gap_ms", "period_ms", "busy_ms")

# Per trace: run id, (steps, first, last), steady steps (a range minus some), medians of the steady
# steps (ms), one steady row (ns), bubble per phase by the began-in rule and per top-level part by
# time (ms, summed over the steady steps), the sync inventory, the idle histogram (lo_us, gaps,
# kernel gaps; empty buckets left out) and the top kernels (name, phase, calls, total ms).
EXPECTED = {
    "qwen3-0.6b-s1-d1.sqlite.gz": {
        "run_id": "48494d8bc1aeb8a5",
        "steps": (152, 70, 221),
        "steady": (75, 219, [156, 157]),
        "medians": {
            "forward_ms": 1.457345,
            "sampling_ms": 0.023456,
            "bubble_ms": 0.556993,
            "kernel_gap_ms": 0.067968,
            "period_ms": 2.033698,
            "busy_ms": 1.415745,
        },
        "row": (
            146,
            {
                "forward_ms": 1456417,
                "sampling_ms": 23072,
                "bubble_ms": 971393,
                "kernel_gap_ms": 68032,
                "period_ms": 2450882,
                "busy_ms": 1413985,
            },
        ),
        "began": {"wait": 97.460603},
        "by_time": {
            "launch": 83.744664,
            "commit": 6.586624,
            "outside any phase": 5.689458,
            "plan": 1.439857,
        },
        "syncs": {"copy DtoH pinned 16 B copy_d2h": 151, "sync event sync wait": 151},
        "hist": [
            (0, 73343, 73343),
            (2, 338, 301),
            (5, 49, 0),
            (10, 57, 0),
            (100, 87, 0),
            (200, 143, 0),
            (500, 54, 0),
            (1000, 2, 0),
        ],
        "kernels": [
            ("nvjet_sm90_tst_8x64_64x16_2x1_v_bz_TNN", "forward", 4200, 48.141067),
            ("nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT", "forward", 8400, 43.740369),
            ("nvjet_sm90_tst_64x8_64x16_4x1_v_bz_splitK_TNT", "forward", 4200, 20.772785),
        ],
        "host_late_share": 0.988005,
    },
    "qwen3-0.6b-s1-d2.sqlite.gz": {
        "run_id": "c9f9c22e919e205d",
        "steps": (154, 69, 222),
        "steady": (75, 220, [156, 157]),
        "medians": {
            "forward_ms": 1.456609,
            "sampling_ms": 0.024272,
            "bubble_ms": 0.022272,
            "kernel_gap_ms": 0.069136,
            "period_ms": 1.503265,
            "busy_ms": 1.415281,
        },
        "row": (
            147,
            {
                "forward_ms": 1460993,
                "sampling_ms": 24032,
                "bubble_ms": 22336,
                "kernel_gap_ms": 69056,
                "period_ms": 1507361,
                "busy_ms": 1419873,
            },
        ),
        "began": {"wait": 3.19114, "copy_d2h": 0.022464},
        "by_time": {"commit": 3.202946, "finalize": 0.007442, "outside any phase": 0.003216},
        "syncs": {"copy DtoH pinned 16 B copy_d2h": 151, "sync event sync wait": 152},
        "hist": [(0, 73863, 73863), (2, 313, 292), (5, 192, 3), (10, 99, 0)],
        "kernels": [
            ("nvjet_sm90_tst_8x64_64x16_2x1_v_bz_TNN", "forward", 4210, 48.246182),
            ("nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT", "forward", 8421, 43.870215),
            ("nvjet_sm90_tst_64x8_64x16_4x1_v_bz_splitK_TNT", "forward", 4210, 20.84479),
        ],
        "host_late_share": 0.0,
    },
    "qwen3-0.6b-s32-d1.sqlite.gz": {
        "run_id": "91653234712879d4",
        "steps": (151, 95, 245),
        "steady": (
            106,
            184,
            [
                114,
                115,
                127,
                128,
                129,
                130,
                133,
                134,
                135,
                136,
                137,
                138,
                139,
                140,
                141,
                142,
                146,
                147,
                150,
                151,
                153,
                154,
                156,
                157,
                163,
                164,
                168,
                169,
                175,
                176,
                177,
                178,
                180,
                181,
                182,
                183,
            ],
        ),
        "medians": {
            "forward_ms": 1.508418,
            "sampling_ms": 0.039713,
            "bubble_ms": 0.596864,
            "kernel_gap_ms": 0.06432,
            "period_ms": 2.137154,
            "busy_ms": 1.486945,
        },
        "row": (
            143,
            {
                "forward_ms": 1507329,
                "sampling_ms": 41408,
                "bubble_ms": 704673,
                "kernel_gap_ms": 64320,
                "period_ms": 2253410,
                "busy_ms": 1486945,
            },
        ),
        "began": {"wait": 26.96998},
        "by_time": {
            "launch": 21.213427,
            "commit": 2.581221,
            "plan": 1.672457,
            "outside any phase": 1.502875,
        },
        "syncs": {
            "copy DtoH pinned 152 B copy_d2h": 5,
            "copy DtoH pinned 16 B copy_d2h": 18,
            "copy DtoH pinned 160 B copy_d2h": 6,
            "copy DtoH pinned 168 B copy_d2h": 15,
            "copy DtoH pinned 176 B copy_d2h": 1,
            "copy DtoH pinned 184 B copy_d2h": 2,
            "copy DtoH pinned 192 B copy_d2h": 4,
            "copy DtoH pinned 200 B copy_d2h": 4,
            "copy DtoH pinned 208 B copy_d2h": 8,
            "copy DtoH pinned 216 B copy_d2h": 3,
            "copy DtoH pinned 224 B copy_d2h": 1,
            "copy DtoH pinned 232 B copy_d2h": 3,
            "copy DtoH pinned 24 B copy_d2h": 2,
            "copy DtoH pinned 240 B copy_d2h": 2,
            "copy DtoH pinned 248 B copy_d2h": 4,
            "copy DtoH pinned 256 B copy_d2h": 2,
            "copy DtoH pinned 264 B copy_d2h": 69,
            "copy DtoH pinned 32 B copy_d2h": 1,
            "sync event sync wait": 151,
        },
        "hist": [
            (0, 19645, 19645),
            (2, 96, 92),
            (5, 22, 0),
            (10, 17, 0),
            (200, 85, 0),
            (1000, 1, 0),
        ],
        "kernels": [
            ("_decode_kernel", "forward", 3640, 35.75053),
            ("nvjet_sm90_tst_64x32_64x16_4x1_v_bz_TNT", "forward", 3640, 21.980852),
            ("nvjet_sm90_tst_64x8_64x16_2x4_h_bz_TNT", "forward", 3640, 20.270159),
        ],
        "host_late_share": 0.985837,
    },
    "qwen3-0.6b-s32-d2.sqlite.gz": {
        "run_id": "66bb15ffc6e6a87f",
        "steps": (154, 95, 248),
        "steady": (
            104,
            182,
            [
                105,
                106,
                115,
                116,
                128,
                129,
                130,
                135,
                136,
                137,
                139,
                140,
                142,
                143,
                146,
                147,
                150,
                151,
                152,
                154,
                155,
                157,
                158,
                164,
                165,
                169,
                170,
                176,
                177,
                179,
                180,
                181,
            ],
        ),
        "medians": {
            "forward_ms": 1.509186,
            "sampling_ms": 0.040416,
            "bubble_ms": 0.022432,
            "kernel_gap_ms": 0.065024,
            "period_ms": 1.572514,
            "busy_ms": 1.488834,
        },
        "row": (
            134,
            {
                "forward_ms": 1515106,
                "sampling_ms": 41152,
                "bubble_ms": 22624,
                "kernel_gap_ms": 66304,
                "period_ms": 1578882,
                "busy_ms": 1493122,
            },
        ),
        "began": {"wait": 1.032129, "forward": 0.058816},
        "by_time": {"commit": 1.032129, "launch": 0.058816},
        "syncs": {
            "copy DtoH pinned 152 B copy_d2h": 7,
            "copy DtoH pinned 16 B copy_d2h": 17,
            "copy DtoH pinned 160 B copy_d2h": 5,
            "copy DtoH pinned 168 B copy_d2h": 15,
            "copy DtoH pinned 176 B copy_d2h": 2,
            "copy DtoH pinned 184 B copy_d2h": 1,
            "copy DtoH pinned 192 B copy_d2h": 4,
            "copy DtoH pinned 200 B copy_d2h": 5,
            "copy DtoH pinned 208 B copy_d2h": 8,
            "copy DtoH pinned 216 B copy_d2h": 3,
            "copy DtoH pinned 232 B copy_d2h": 4,
            "copy DtoH pinned 24 B copy_d2h": 4,
            "copy DtoH pinned 240 B copy_d2h": 2,
            "copy DtoH pinned 248 B copy_d2h": 7,
            "copy DtoH pinned 256 B copy_d2h": 15,
            "copy DtoH pinned 264 B copy_d2h": 52,
            "sync event sync wait": 152,
        },
        "hist": [(0, 21474, 21474), (2, 106, 97), (5, 64, 2), (10, 31, 0), (20, 1, 0)],
        "kernels": [
            ("_decode_kernel", "forward", 3651, 35.908443),
            ("nvjet_sm90_tst_64x32_64x16_4x1_v_bz_TNT", "forward", 3650, 22.079956),
            ("nvjet_sm90_tst_64x8_64x16_2x4_h_bz_TNT", "forward", 3650, 20.304297),
        ],
        "host_late_share": 0.0,
    },
}
NAMES = sorted(EXPECTED)


def test_the_committed_trace_set_is_the_pinned_one():
    """A changed trace set fails here, loudly, instead of skipping the module: recompute EXPECTED
    with `python -m tests.pin_real_traces` and review the diff."""
    assert sorted(p.name for p in TRACES.glob("*.sqlite.gz")) == NAMES


@pytest.fixture(scope="module")
def catalog():
    con = connect(None)
    return con, {name: ingest(TRACES / name, None, {}, con=con) for name in NAMES}


@pytest.mark.parametrize("name", NAMES)
def test_per_step_and_steady_state(catalog, name):
    con, runs = catalog
    e, run = EXPECTED[name], runs[name]
    assert run == e["run_id"]
    steps = analysis.per_step(con, run)
    assert (len(steps), steps.step.min(), steps.step.max()) == e["steps"]
    steady = analysis.steady_state(steps)
    first, last, left_out = e["steady"]
    assert steady.step.tolist() == [s for s in range(first, last + 1) if s not in left_out]
    assert {c: steady[c].median() for c in MEDIAN_COLUMNS} == pytest.approx(e["medians"], abs=1e-6)
    step, values = e["row"]
    row = steps.set_index("step").loc[step]
    assert {c: round(row[c] * 1e6) for c in values} == values


@pytest.mark.parametrize("name", NAMES)
def test_attribution_syncs_gaps_kernels(catalog, name):
    con, runs = catalog
    e, run = EXPECTED[name], runs[name]
    steady = analysis.steady_state(analysis.per_step(con, run))
    began = analysis.attribution(con, run, steady)
    assert dict(zip(began.phase, began.bubble_ms, strict=True)) == pytest.approx(
        e["began"], abs=1e-6
    )
    by_time = analysis.rollup(analysis.attribution_by_time(con, run, steady))
    assert by_time.to_dict() == pytest.approx(e["by_time"], abs=1e-6)
    assert sum(e["began"].values()) == pytest.approx(steady.bubble_ms.sum(), abs=1e-6)
    syncs = analysis.sync_inventory(con, run)
    counts = syncs.groupby(["event", "detail", "phase"]).size()
    assert {" ".join(key): n for key, n in counts.items()} == e["syncs"]
    assert not syncs.flagged.any()
    hist = analysis.idle_histogram(con, run, steady)
    assert [
        tuple(r) for r in hist[hist.gaps > 0][["lo_us", "gaps", "kernel_gaps"]].values.tolist()
    ] == e["hist"]
    kernels = analysis.kernel_summary(con, run).head(3)
    assert [
        (r.name, r.phase, r.calls, pytest.approx(r.total_ms, abs=1e-6))
        for r in kernels.itertuples()
    ] == e["kernels"]


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
        assert {r.phase: round(r.bubble_ms * 1e6) for r in table.itertuples()} == expected["began"]


def test_analyze_report(catalog):
    """`bubblelab analyze --json`: per (depth, streams) the pinned medians, and the top-level
    attribution per steady step adding up to the mean bubble."""
    con, runs = catalog
    report = analysis.analyze(con, [runs[name] for name in NAMES])
    groups = {(g["depth"], g["streams"]): g for g in report["groups"]}
    assert sorted(groups) == [(1, 1), (1, 32), (2, 1), (2, 32)]
    for name in NAMES:
        streams, depth = (int(part[1:]) for part in name.removesuffix(".sqlite.gz").split("-")[-2:])
        group, e = groups[depth, streams], EXPECTED[name]
        assert group["runs"] == [e["run_id"]]
        assert {c: group[c]["median"] for c in MEDIAN_COLUMNS} == pytest.approx(
            e["medians"], abs=1e-6
        )
        assert all(group[c]["p10"] <= group[c]["median"] <= group[c]["p90"] for c in MEDIAN_COLUMNS)
        attribution = group["attribution_ms_per_step"]
        bubble_per_step = sum(e["began"].values()) / group["steps"]
        for view in ("phase", "top_level", "top_level_by_time"):
            assert sum(attribution[view].values()) == pytest.approx(bubble_per_step, abs=1e-5)
        assert (
            attribution["top_level"]["commit"] >= 0.9 * bubble_per_step
        )  # began inside the commit (its wait)
        assert group["host_late_share"] == pytest.approx(e["host_late_share"], abs=1e-6)
    assert [r["flagged_syncs"] for r in report["runs"]] == [0] * 4
    # depth 1 leaves the GPU waiting on the host (the rest are the few-us gaps before a forward
    # whose graph was already queued); depth 2 had queued the next work before the GPU ran dry
    assert all(groups[1, s]["host_late_share"] > 0.9 for s in (1, 32))
    assert [groups[2, s]["host_late_share"] for s in (1, 32)] == [0.0, 0.0]
