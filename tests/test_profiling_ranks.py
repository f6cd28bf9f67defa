"""Per-rank analysis of a tensor-parallel run on a hand-laid nsys export of two (and three)
processes on their own GPUs (testing.synthetic_tp_trace): every number below is read off the
layout in that module's docstring."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from bubblelab.profiling import overview, ranks
from bubblelab.profiling.catalog import connect
from bubblelab.profiling.ingest import ingest_trace
from testing.synthetic_tp_trace import ALL_GATHER, ALL_REDUCE, STEPS, STRAGGLER_FLIP, tp_trace
from testing.synthetic_trace import COMPUTE, TraceBuilder
from tests.cli_helpers import run_bubblelab

STEADY = list(range(1, STEPS - 1))  # warm-up 0: decodes followed by a decode, with a period


def bubblelab(*args: str) -> subprocess.CompletedProcess:
    return run_bubblelab(*args, columns=160, timeout=120)


@pytest.fixture(scope="module")
def tp2(tmp_path_factory):
    trace = tp_trace(tmp_path_factory.mktemp("tp") / "tp2.sqlite")
    con = connect(None)
    return trace, con, ingest_trace(trace, None, {}, con=con)


def test_each_process_is_a_run_with_its_rank(tp2):
    trace, con, run_ids = tp2
    runs = con.sql(
        "SELECT r.run_id, r.rank, r.tensor_parallel, s.device FROM runs r "
        "JOIN step_rules s USING (run_id) ORDER BY rank"
    ).fetchall()
    # rank 0 is the process that plans, on GPU 0; the worker on GPU 1 is rank 1
    assert [(rank, tp, device) for _, rank, tp, device in runs] == [(0, 2, 0), (1, 2, 1)]
    assert sorted(r for r, *_ in runs) == sorted(run_ids)
    groups = ranks.tp_groups(con)
    assert groups.values.tolist() == [[runs[0][0], 0, runs[0][0]], [runs[0][0], 1, runs[1][0]]]
    # ingesting again adds nothing and keeps the ranks
    assert ingest_trace(trace, None, {}, con=con) == run_ids
    assert ranks.tp_groups(con).equals(groups)


def test_every_rank_has_its_own_per_step_table_matched_by_step_id(tp2):
    _, con, _ = tp2
    lead = ranks.tp_groups(con)["run_id"].iloc[0]
    steps = ranks.rank_steps(con, lead)
    assert len(steps) == 2 * STEPS and set(steps.groupby("step")["rank"].nunique()) == {2}
    r0 = steps[(steps["rank"] == 0) & (steps["step"] != STRAGGLER_FLIP)].iloc[1]
    r1 = steps[steps["rank"] == 1].iloc[1]
    t = 11000  # step 1 starts at T = 11000 us
    # rank 0: forward [120,560), argmax [560,580), the rest of its 1 ms period idle
    assert (r0.forward_ms, r0.sampling_ms, r0.bubble_ms, r0.period_ms) == (0.44, 0.02, 0.54, 1.0)
    assert (r0.compute_ms, r0.comm_ms, r0.comm_exposed_ms, r0.comm_kernels) == (0.3, 0.16, 0.16, 2)
    assert r0.handoff_ms == pytest.approx(0.03)  # [60,80) in launch + [205,215) in finalize
    assert (r0.forward_start, r0.launch_start) == ((t + 120) * 1000, (t + 50) * 1000)
    # rank 1 starts 80 us later and waits 80 us less in NCCL: 180 + 100 + 30 of compute, 40 + 40
    assert (r1.forward_ms, r1.sampling_ms, r1.bubble_ms) == (0.36, 0.03, 0.61)
    assert (r1.compute_ms, r1.comm_ms, r1.comm_kernels) == (0.31, 0.08, 2)
    assert r1.handoff_ms is None or r1.handoff_ms != r1.handoff_ms  # NULL: workers hand nothing
    assert r1.forward_start == (t + 200) * 1000 and r1.launch_end == (t + 230) * 1000


def test_the_straggler_and_the_skew_of_every_step(tp2):
    _, con, _ = tp2
    steps = ranks.rank_steps(con, ranks.tp_groups(con)["run_id"].iloc[0])
    late = ranks.stragglers(steps).set_index("step")
    flip = late.loc[STRAGGLER_FLIP]
    others = late.drop(index=STRAGGLER_FLIP)
    # rank 1's argmax ends at 590, rank 0's at 580 (at the flip step 600): 10 us either way
    assert set(others["gpu_straggler"]) == {1} and flip["gpu_straggler"] == 0
    assert set(others["gpu_extra_ms"].round(6)) == {0.01} and flip["gpu_extra_ms"] == 0
    assert set(late["gpu_margin_ms"].round(6)) == {0.01}
    # rank 1's host ends its launch at 230, rank 0's at 200
    assert set(late["host_straggler"]) == {1} and set(late["host_extra_ms"].round(6)) == {0.03}
    skew = ranks.skew(steps).set_index("step").drop(columns=["run_id", "ranks"]).round(6)
    assert skew.drop(index=STRAGGLER_FLIP).drop_duplicates().to_dict("records") == [
        {
            "forward_start_skew_ms": 0.08,
            "forward_end_skew_ms": 0.0,
            "sampling_end_skew_ms": 0.01,
            "launch_start_skew_ms": 0.1,
            "launch_end_skew_ms": 0.03,
            "finalize_start_skew_ms": 0.03,
            "finalize_end_skew_ms": 0.02,
        }
    ]


def test_analyze_puts_the_ranks_side_by_side_over_rank_0s_steady_steps(tp2):
    _, con, run_ids = tp2
    report = overview.analyze(con, run_ids, warmup=0)
    (tp,) = report["tensor_parallel"]
    assert (tp["ranks"], tp["steady_steps"]) == (2, len(STEADY))
    assert [s["step"] for s in tp["steps"]] == STEADY
    r0, r1 = tp["per_rank"]
    assert (r0["rank"], r1["rank"]) == (0, 1)
    # the GPU straggler: rank 1 in 7 of the 8 steady steps; the host straggler always rank 1
    assert (r0["gpu_straggler_share"], r1["gpu_straggler_share"]) == (1 / 8, 7 / 8)
    assert (r0["host_straggler_share"], r1["host_straggler_share"]) == (0, 1)
    assert (r1["forward_lag_ms"], r1["launch_lag_ms"]) == pytest.approx((0.08, 0.1))
    # what each host did while its GPU idled: rank 0 waits in commit for its copy; the worker has
    # finished its finalize and waits for rank 0 outside any range
    bubble0 = (7 * 0.54 + 0.52) / 8  # the flip step's argmax ran 20 us longer
    assert r0["attribution_ms_per_step"]["began"]["phase"] == {"wait": pytest.approx(bubble0)}
    assert r1["attribution_ms_per_step"]["began"]["phase"] == {
        "outside any phase": pytest.approx(0.61)
    }
    for row, bubble in ((r0, bubble0), (r1, 0.61)):  # time-weighted, the same bubble
        by_time = row["attribution_ms_per_step"]["time"]["phase"]
        assert sum(by_time.values()) == pytest.approx(bubble)
    assert tp["skew"]["forward_start_skew_ms"] == {"median": 0.08, "p90": 0.08, "max": 0.08}
    # the pooled groups hold rank 0's runs only
    assert [g["runs"] for g in report["groups"]] == [[tp["run_id"]]]
    assert {r["run_id"]: r["rank"] for r in report["runs"]} == {
        p["rank_run_id"]: p["rank"] for p in tp["per_rank"]
    }


def test_any_number_of_ranks(tmp_path):
    trace = tp_trace(tmp_path / "tp3.sqlite", ranks=3)
    con = connect(None)
    ingest_trace(trace, None, {}, con=con)
    assert con.sql("SELECT rank, tensor_parallel FROM runs ORDER BY rank").fetchall() == [
        (0, 3),
        (1, 3),
        (2, 3),
    ]
    (tp,) = ranks.analyze_ranks(con, warmup=0)
    shares = [r["gpu_straggler_share"] for r in tp["per_rank"]]
    assert shares == [1 / 8, 7 / 8, 0]  # ranks 1 and 2 tie: the lower rank is named


def test_two_engines_in_one_trace_are_not_one_tensor_parallel_run(tmp_path):
    """Two processes that both plan are two engines: no ranks, no cross-rank view."""
    tids = [(486 + i) << 24 | 0x10000000000 | (486 + i) for i in range(2)]
    b = TraceBuilder(domain_tids=tuple(tids), gpus=2)
    for device, tid in enumerate(tids):
        for k in range(4):
            t = 10000 + 1000 * k
            b.range("plan", k, t, t + 50, tid=tid)
            b.range("launch", k, t + 50, t + 200, tid=tid)
            b.mark(k, "kind=decode bs=1 tokens=1 depth=1", t + 50, tid=tid)
            b.range("forward", k, t + 100, t + 190, tid=tid)
            b.kernel("gemm", t + 110, t + 120, t + 300, COMPUTE, tid=tid, device=device)
    con = connect(None)
    run_ids = ingest_trace(b.write(tmp_path / "two.sqlite"), None, {}, con=con)
    assert len(run_ids) == 2
    assert con.sql("SELECT rank, tensor_parallel FROM runs").fetchall() == [(None, None)] * 2
    report = overview.analyze(con, run_ids, warmup=0)
    assert report["tensor_parallel"] == [] and report["split_engines"] == []  # ours: no collectives


def test_another_engines_processes_on_their_own_gpus_are_named_as_one_split_engine(tmp_path, tp2):
    """The same work without bubblelab's ranges (another engine split over two GPUs, as nano-vllm
    at TP 2): no ranks are claimed, and analyze says what the processes look like instead of
    leaving two unrelated-looking runs."""
    trace = tp_trace(tmp_path / "engine-tp2.sqlite", ours=False)
    con = connect(None)
    run_ids = ingest_trace(trace, None, {}, con=con)
    report = overview.analyze(con, run_ids, warmup=0)
    assert report["tensor_parallel"] == []
    (split,) = report["split_engines"]
    assert split["run_ids"] == run_ids and split["gpus"] == 2
    assert split["matched_steps"] == [[STEPS, STEPS], [STEPS, STEPS]]
    assert overview.analyze(tp2[1], tp2[2], warmup=0)["split_engines"] == []  # ours: ranked
    # Side by side, steps matched by shared GPU time: what the layout puts there (the module's
    # docstring). The collectives: rank 0 waits 120 us in its all-reduce, rank 1 40, both 40 in
    # the all-gather, as our own ranges say too. A step's GPU work starts with its HtoD copy
    # (rank 0 at +100 us, rank 1 at +170) and ends with rank 0's DtoH copy at +585 (+605 at
    # STRAGGLER_FLIP) and rank 1's argmax at +590: rank 1 is last by 5 us but at that step.
    ours = {
        r["rank"]: r
        for r in overview.analyze(tp2[1], tp2[2], warmup=0)["tensor_parallel"][0]["per_rank"]
    }
    side = split["ranks"]
    mine = {r["rank"]: r for r in side["per_rank"]}
    assert (
        [mine[r]["comm_ms"] for r in (0, 1)] == [ours[r]["comm_ms"] for r in (0, 1)] == [0.16, 0.08]
    )
    assert [mine[r]["forward_lag_ms"] for r in (0, 1)] == [0.0, pytest.approx(0.07)]
    steady = STEPS - 1  # every step but the last (no period) is steady at --warmup 0
    assert side["steady_steps"] == steady
    assert mine[1]["gpu_straggler_share"] == pytest.approx((steady - 1) / steady)
    assert side["straggler"]["gpu_extra_ms"]["median"] == pytest.approx(0.005)
    out = bubblelab("analyze", str(trace), "--warmup", "0")
    assert out.returncode == 0, out.stderr
    flat = " ".join(out.stdout.split())
    assert (
        "engine-tp2, engine-tp2·2: 2 processes of one trace, each on its own GPU and launching "
        "collectives: most likely one engine split over 2 GPUs" in flat
    )
    assert "(10 of 10, 10 of 10 steps matched)" in flat
    assert "Ranks of engine-tp2: 2 ranks" in flat and "matched by the GPU time they share" in flat


def test_the_cli_prints_a_table_of_the_ranks_and_its_json_carries_them(tp2, tmp_path):
    trace, con, _ = tp2
    stem = ranks.tp_groups(con)["run_id"].iloc[0][:8] + "·tp2·s4·d1·r0"  # no model: the id names it
    out = bubblelab("analyze", str(trace), "--warmup", "0")
    assert out.returncode == 0, out.stderr
    flat = " ".join(out.stdout.split())  # lines wrap at the console's width
    assert "2 ranks, 8 steady steps" in flat
    assert "GPU straggler: 0.010 ms after rank 0's GPU" in flat
    assert "forward start 0.080" in flat and "bubble in commit" in flat
    rows = [line.split("│")[1].strip() for line in out.stdout.splitlines() if line[:1] == "│"]
    assert rows[:2] == [stem, stem + "·rank1"]  # the worker is named after its rank 0
    dest = tmp_path / "a.json"
    out = bubblelab("analyze", str(trace), "--warmup", "0", "--json", str(dest))
    assert out.returncode == 0, out.stderr
    (tp,) = json.loads(dest.read_text())["tensor_parallel"]
    assert [r["comm_ms"] for r in tp["per_rank"]] == [0.16, 0.08]
    assert tp["name"].endswith("·r0") and len(tp["steps"]) == len(STEADY)


def test_collectives_are_told_apart_by_name():
    assert all(re.search(ranks.COMM_KERNELS, name) for name in (ALL_REDUCE, ALL_GATHER))
    assert not re.search(ranks.COMM_KERNELS, "gemm_a")


NANO_TP2 = Path(__file__).parents[1] / "traces" / "foreign" / "nanovllm-tp2.sqlite.gz"


def test_a_worker_with_no_read_of_its_own_is_sure_through_rank_0s_steps():
    """nano-vllm at TP 2 on two H100s: rank 1 reads nothing back and waits for rank 0's message
    in sem_wait, so its own rules cannot confirm its graph-replay steps; rank 0's steps are sure
    (closed by the token read), and each of rank 1's shares its GPU time with a distinct one of
    them at the same period: the ranks are sure together."""
    con = connect(None)
    run_ids = ingest_trace(NANO_TP2, None, {}, con=con)
    report = overview.analyze(con, run_ids)
    found = {r["run_id"]: r["steps_found"] for r in report["runs"]}
    assert [(found[r]["rule"], found[r]["sure"]) for r in run_ids] == [
        ("sync", True),
        ("graph", False),
    ]
    (split,) = report["split_engines"]
    assert split["matched_steps"] == [[65, 65], [63, 63]]
    assert split["sure"] and "rank 1: 4.237 ms" in split["evidence"]
    # cut by two rules, the steps' edges are the rules' (rank 0's open with its input upload, rank
    # 1's end with the next step's): rank 1 came out 'last by 1.41 ms' where the graphs end together
    assert "cut by graph and sync rules" in split["cross_rank_timing"]
    side = split["ranks"]
    assert [r["gpu_straggler_share"] for r in side["per_rank"]] == [None, None]
    assert side["straggler"]["gpu_extra_ms"]["median"] is None
    assert [r["comm_ms"] for r in side["per_rank"]] == [pytest.approx(0.981, abs=5e-4)] + [
        pytest.approx(0.518, abs=5e-4)
    ]


@pytest.mark.parametrize(
    ("rank0", "counts", "period1", "sure"),
    [
        ("high", [[10, 10], [10, 10]], 1.02, True),
        ("medium", [[10, 10], [10, 10]], 1.0, False),  # rank 0 unsure: nothing to lean on
        ("high", [[10, 10], [9, 10]], 1.0, False),  # a worker's step matched no step of rank 0
        ("high", [[10, 10], [10, 10]], 1.2, False),  # another period: other steps
    ],
)
def test_ranks_are_sure_together_only_on_sure_rank_0_steps_matched_one_to_one(
    rank0, counts, period1, sure
):
    found = {"a": {"confidence": rank0, "steps": 10}, "b": {"confidence": "low", "steps": 10}}
    side = {"per_rank": [{"rank": 0, "period_ms": 1.0}, {"rank": 1, "period_ms": period1}]}
    assert (overview._confirmed(["a", "b"], found, counts, side) is not None) is sure
