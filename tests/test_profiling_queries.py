"""Every profiling query against synthetic nsys exports whose answers were computed by hand
(layouts in tests/profiling_trace_builder.py: blocking_trace at depth 1, pipelined_trace at depth
2)."""

from __future__ import annotations

import pandas as pd
import pytest

from bubblelab.core.contract import STEP_COLUMNS
from bubblelab.profiling import analysis
from bubblelab.profiling.catalog import connect
from bubblelab.profiling.ingest import ingest
from tests.profiling_trace_builder import blocking_trace, pipelined_trace


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    root = tmp_path_factory.mktemp("traces")
    con = connect(root / "catalog.duckdb")
    blocking = ingest(blocking_trace(root / "blocking.sqlite"), None, {"streams": 4}, con=con)
    pipelined = ingest(pipelined_trace(root / "pipelined.sqlite"), None, {"streams": 2}, con=con)
    return con, blocking, pipelined


def test_per_step_blocking(catalog):
    con, run, _ = catalog
    df = analysis.per_step(con, run)
    assert list(df.columns) == list(STEP_COLUMNS)
    assert list(df.step) == [0, 1, 2, 3, 4, 5]
    assert list(df.kind) == ["prefill"] + ["decode"] * 5
    assert list(df.batch_size) == [4, 4, 4, 4, 4, 3]
    assert set(df.depth) == {1}
    # forward = the span of A and B [200,700); sampling = the argmax [700,750), not its DtoH copy
    # (copy stream)
    assert df.forward_ms.tolist() == pytest.approx([0.5] * 6)
    assert df.sampling_ms.tolist() == pytest.approx([0.05] * 6)
    assert df.kernel_gap_ms.tolist() == pytest.approx([0.01] * 6)  # B starts 10 us after A ends
    # period 1 ms; busy = A,B (490 us), argmax, DtoH, the next step's HtoD (+ the pageable copy in
    # step 1)
    assert df.period_ms[:5].tolist() == pytest.approx([1.0] * 5)
    assert df.busy_ms[:5].tolist() == pytest.approx([0.56, 0.565, 0.56, 0.56, 0.56])
    assert df.bubble_ms[:5].tolist() == pytest.approx([0.45] * 5)  # period - forward - sampling
    # period - busy = bubble + kernel_gap - other (the copies: DtoH, next HtoD, step 1's pageable
    # copy)
    other = df.bubble_ms + df.kernel_gap_ms - (df.period_ms - df.busy_ms)
    assert other[:5].tolist() == pytest.approx([0.02, 0.025, 0.02, 0.02, 0.02])
    assert (
        df.loc[5, ["period_ms", "busy_ms", "bubble_ms"]].isna().all()
    )  # the last step has no next step
    assert df.plan_ms.tolist() == pytest.approx([0.1] * 6)
    assert df.launch_ms.tolist() == pytest.approx([0.2] * 6)
    assert df.finalize_ms.tolist() == pytest.approx([0.1] * 6)
    assert df.commit_ms.tolist() == pytest.approx([0.5] * 6)
    assert df.wait_ms.tolist() == pytest.approx([0.36] * 6)
    assert df.gpu_start_ns.tolist() == [10_200_000 + 1_000_000 * k for k in range(6)]
    assert df.gpu_end_ns.tolist() == [
        10_760_000,
        11_805_000,
        12_760_000,
        13_760_000,
        14_760_000,
        15_760_000,
    ]


def test_per_step_pipelined(catalog):
    con, _, run = catalog
    df = analysis.per_step(con, run)
    assert set(df.depth) == {2} and set(df.kind) == {"decode"}
    # forward = span of the memset [108,110) on the copy stream and A [110,310) B [310,460);
    # sampling: argmax
    assert df.forward_ms.tolist() == pytest.approx([0.352] * 5)
    assert df.sampling_ms.tolist() == pytest.approx([0.02] * 5)
    assert df.kernel_gap_ms.tolist() == pytest.approx([0.0] * 5)
    # the period starts inside the HtoD copy [100,110): only its part after gpu_start counts as busy
    assert df.period_ms[:4].tolist() == pytest.approx([0.4] * 4)
    assert df.busy_ms[:4].tolist() == pytest.approx([0.39] * 4)
    # the compute stream idles [480,508): the DtoH copy on the copy stream and the next HtoD do not
    # fill it
    assert df.bubble_ms[:4].tolist() == pytest.approx([0.028] * 4)
    assert df.commit_ms.tolist() == pytest.approx(
        [0.15] * 5
    )  # committed one tick later, same payload
    assert df.wait_ms.tolist() == pytest.approx([0.045] * 5)
    assert df.gpu_start_ns.tolist() == [20_108_000 + 400_000 * k for k in range(5)]


def test_steady_state_rule(catalog):
    con, blocking, pipelined = catalog
    both = pd.concat([analysis.per_step(con, blocking), analysis.per_step(con, pipelined)])
    steady = analysis.steady_state(both, warmup=1)
    # blocking: prefill 0 and ramp-down 5 (bs 3) are out, 4 stays (next is decode), first candidate
    # (1) skipped
    assert steady[steady.run_id == blocking].step.tolist() == [2, 3, 4]
    assert steady[steady.run_id == pipelined].step.tolist() == [1, 2, 3]
    assert list(steady.columns) == list(STEP_COLUMNS)
    by_run = analysis.steady_state(both, warmup=0).groupby("run_id").step.apply(list).to_dict()
    assert by_run == {blocking: [1, 2, 3, 4], pipelined: [0, 1, 2, 3]}


def test_idle_gaps_and_histogram(catalog):
    con, run, _ = catalog
    steps = analysis.steady_state(analysis.per_step(con, run), warmup=1)
    gaps = analysis.idle_gaps(con, run, steps)
    assert gaps.step.tolist() == [2, 2, 2, 3, 3, 3, 4, 4, 4]
    assert gaps.idle_us.tolist() == [10.0, 380.0, 50.0] * 3
    assert (
        gaps.within.fillna("-").tolist() == ["forward", "-", "-"] * 3
    )  # A-B launch gap, then the bubble
    assert gaps.began_in.tolist() == ["wait", "wait", "forward"] * 3
    # B was queued 300 us before A ended; the next HtoD copy was launched 355 us after the GPU went
    # idle, the next forward kernel 10 us after
    assert gaps.launch_lag_us.tolist() == [-300.0, 355.0, 10.0] * 3
    assert gaps.idle_us.sum() / 1e3 == pytest.approx((steps.period_ms - steps.busy_ms).sum())
    hist = analysis.idle_histogram(con, run, steps).set_index("lo_us")
    assert hist.gaps.sum() == 9 and hist.kernel_gaps.sum() == 3
    assert hist.loc[10, ["gaps", "kernel_gaps"]].tolist() == [3, 3]
    assert (
        hist.loc[50, "gaps"] == 3
        and hist.loc[200, "gaps"] == 3
        and hist.loc[50, "kernel_gaps"] == 0
    )
    assert hist.loc[200, "idle_ms"] == pytest.approx(1.14)


def test_bubble_intervals(catalog):
    con, run, _ = catalog
    steps = analysis.per_step(con, run).query("step in (1, 2)")
    intervals = analysis.bubble_intervals(con, run, steps)
    # each period minus its spans: from the end of sampling (750) to the next forward (1200)
    assert intervals.values.tolist() == [[1, 11_750_000, 12_200_000], [2, 12_750_000, 13_200_000]]


def test_bubble_attribution_blocking(catalog):
    con, run, _ = catalog
    steps = analysis.steady_state(analysis.per_step(con, run), warmup=1)
    table = analysis.attribution(con, run, steps)
    # every bubble interval [750,1200) begins while the host waits for the step's copy
    began = table[table.began_ms > 0]
    assert began[["run_id", "phase", "top_level"]].values.tolist() == [[run, "wait", "commit"]]
    assert began.began_ms.tolist() == pytest.approx([1.35]) and began.began_share.tolist() == [1.0]
    # time-weighted, the same 450 us: wait 20, commit 130, between ticks 100, next plan 100, launch
    # 30, copy_h2d 20, forward 50
    table = table.set_index("phase")
    expected = {
        "commit": 0.39,
        "outside any phase": 0.30,
        "plan": 0.30,
        "forward": 0.15,
        "launch": 0.09,
        "copy_h2d": 0.06,
        "wait": 0.06,
    }
    assert table.time_ms.to_dict() == pytest.approx(expected)
    assert table.time_ms.sum() == pytest.approx(steps.bubble_ms.sum())
    assert table.time_share.sum() == pytest.approx(1.0)
    # the headline split first: largest time first
    assert table.time_ms.tolist() == sorted(table.time_ms, reverse=True)
    assert analysis.rollup(table.reset_index()).time_ms.to_dict() == pytest.approx(
        {"commit": 0.45, "outside any phase": 0.30, "plan": 0.30, "launch": 0.30}
    )
    assert analysis.rollup(table.reset_index()).began_ms.to_dict() == pytest.approx(
        {"commit": 1.35, "outside any phase": 0.0, "plan": 0.0, "launch": 0.0}
    )


def test_bubble_attribution_step_one_and_pipelined(catalog):
    con, blocking, pipelined = catalog
    one = analysis.per_step(con, blocking).query("step == 1")
    table = analysis.attribution(con, blocking, one).set_index("phase")
    assert table.time_ms.to_dict() == pytest.approx(
        {
            "commit": 0.13,
            "outside any phase": 0.1,
            "plan": 0.1,
            "forward": 0.05,
            "launch": 0.03,
            "copy_h2d": 0.02,
            "wait": 0.02,
        }
    )
    assert analysis.attribution(con, pipelined).empty  # default warm-up (5) leaves no steady steps
    everything = analysis.per_step(con, blocking)  # all steps with a period: 5 x 450 us
    table = analysis.attribution(con, blocking, everything)
    for split in ("time_ms", "began_ms"):
        assert (
            table[split].sum() == pytest.approx(everything.bubble_ms.sum()) == pytest.approx(2.25)
        )
    steps = analysis.steady_state(analysis.per_step(con, pipelined), warmup=1)
    # pipelined, the compute stream idles [480,508) while the host is inside the next step's
    # `forward`
    table = analysis.attribution(con, pipelined, steps)
    assert table[["phase", "top_level"]].values.tolist() == [["forward", "launch"]]
    for split in ("time_ms", "began_ms"):
        assert table[split].tolist() == pytest.approx([0.084])
    # the work ending each GPU-idle gap [490,500) had been queued 32 us before: not a host-bound
    # bubble
    assert analysis.idle_gaps(con, pipelined, steps).launch_lag_us.tolist() == [-32.0] * 3


def test_sync_inventory(catalog):
    con, blocking, pipelined = catalog
    inv = analysis.sync_inventory(con, blocking)
    # 6 waits, 6 sampled-id copies, 1 bug sync, 1 .item(), 1 teardown sync; no polls, no
    # stream-wait-events
    assert len(inv) == 15
    assert not inv.api.str.contains("EventQuery|StreamWaitEvent").any()
    flagged = inv[inv.flagged]
    assert flagged[["event", "phase", "step"]].values.tolist() == [
        ["copy", "commit", 1],
        ["sync", "mask", 2],
    ]
    assert flagged.detail.tolist() == ["DtoH pageable 64 B", "stream sync"]
    assert "pageable" in flagged.reason.iloc[0] and "outside copy_d2h" in flagged.reason.iloc[0]
    waits = inv[(inv.event == "sync") & (inv.phase == "wait")]
    assert not waits.flagged.any() and waits.detail.unique().tolist() == ["event sync"]
    assert waits.host_us.tolist() == pytest.approx([345.0] * 6)
    teardown = inv.iloc[-1]  # after the loop: listed, not a stall
    assert (teardown.api, teardown.detail, teardown.phase, teardown.flagged) == (
        "cudaDeviceSynchronize_v3020",
        "context sync",
        "outside any phase",
        False,
    )
    assert not analysis.sync_inventory(con, pipelined).flagged.any()


def test_kernel_summary(catalog):
    con, run, _ = catalog
    table = analysis.kernel_summary(con, run)
    row = table[(table.name == "gemm_a") & (table.phase == "forward")].iloc[0]
    assert (row.calls, row.total_ms, row.mean_us) == (5, pytest.approx(1.5), pytest.approx(300.0))
    assert table[table.name == "argmax"].calls.tolist() == [6]
    assert table.share.sum() == pytest.approx(1.0)


def test_summarize(catalog):
    con, _, run = catalog
    summary = analysis.summarize(analysis.steady_state(analysis.per_step(con, run), warmup=1))
    assert summary["steps"] == 3
    assert summary["period_ms"] == {"median": 0.4, "p10": 0.4, "p90": 0.4}
    assert summary["bubble_ms"]["median"] == pytest.approx(0.028)
    assert summary["kernel_gap_ms"] == {"median": 0.0, "p10": 0.0, "p90": 0.0}
    assert summary["bubble_share"] == pytest.approx(0.07)


def test_runs_table(catalog):
    con, blocking, _ = catalog
    row = analysis.runs(con).set_index("run_id").loc[blocking]
    assert (row.depth, row.streams, row.decode_steps, row.source) == (1, 4, 5, "nsys")
    assert (row.device, row.driver, row.nsys_version, row.schema_version) == (
        "Fake GPU",
        "580.159.04",
        "2025.3.2.0",
        "3.20.3",
    )
