"""The whole-run model: step costs measured from a run, the depth-2 wall they add up to, and the
terms between the prediction from depth 1 alone and the one from both runs. Hand-built tables are
worked out by
hand; simulated runs (costmodel.simulate) give known answers for each term."""

import gzip
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bubblelab.core.errors import BubblelabError
from bubblelab.costmodel.configs import pair_runs
from bubblelab.costmodel.costs import Curve, RunCosts, own_gpu_ms, tick_host_ms
from bubblelab.costmodel.predict import predict_runs
from bubblelab.costmodel.schedule import Limits, Request, record, requests_from_table
from bubblelab.costmodel.simulate import LoopCosts, simulate_run
from bubblelab.costmodel.wholerun import TERMS, depth2_order, pipelined_wall_ms, predict_pair_wall
from bubblelab.runs.merge import merge_results
from bubblelab.runs.rundir import read_results, write_results

PLAN, FINALIZE, COMMIT = (
    0.05,
    0.10,
    0.05,
)  # host bookkeeping of every tick (ms); commit's part outside wait


def d1_step(
    step: int, kind: str, rows: int, launch: float, gpu: float, paced: bool = False
) -> dict:
    """One depth-1 step. A graph replay starts on the GPU when its launch returns; a paced (eager)
    step's kernels run while its launch issues them, so its span covers the launch and ends FINALIZE
    later."""
    wait = max(0.0, gpu - FINALIZE) if not paced else 0.01
    span = launch + FINALIZE + wait if paced else gpu
    return dict(
        run_id="r", step=step, kind=kind, depth=1, batch_size=rows, forward_ms=span,
        sampling_ms=0.0, kernel_gap_ms=0.0, plan_ms=PLAN, launch_ms=launch, finalize_ms=FINALIZE,
        commit_ms=COMMIT + wait, wait_ms=wait, period_ms=PLAN + launch + FINALIZE + COMMIT + wait,
        busy_ms=span, bubble_ms=0.0, gpu_start_ns=None, gpu_end_ns=None,
    )  # fmt: skip


def frame(rows: list[dict]) -> pd.DataFrame:
    steps = pd.DataFrame(rows)
    steps.loc[steps.index[-1], "period_ms"] = None  # the last step has no successor
    return steps


DECODE = dict(kind="decode", rows=4, launch=0.2, gpu=5.0)
HOST = PLAN + 0.2 + FINALIZE + COMMIT  # a decode tick's host work: 0.4 ms
PREFILL_LAUNCH = 30.0  # eager prefill: Python launching kernels


def test_curves_interpolate_and_never_fall_beyond_the_points():
    curve = Curve.mean_by([1, 1, 4, 8], [1.0, 3.0, 5.0, 4.0])  # the mean at each x: 2, 5, 4
    assert curve([1, 2.5, 4, 6]).tolist() == pytest.approx([2.0, 3.5, 5.0, 4.5])
    assert curve([0, 16]).tolist() == pytest.approx([1.0, 4.0])  # the first slope below; flat above
    assert Curve.mean_by([3], [7.0])([1, 100]).tolist() == [7.0, 7.0]
    with pytest.raises(BubblelabError, match="no steps"):
        Curve.mean_by([], [])


def test_a_paced_prefill_owns_only_the_gpu_work_after_its_launch():
    steps = frame([d1_step(0, **DECODE), d1_step(1, "prefill", 1, PREFILL_LAUNCH, 2.0, paced=True)])
    assert own_gpu_ms(steps).tolist() == pytest.approx([5.0, FINALIZE + 0.01])
    # A decode is a graph replay: never paced, even when the host never waited on it (host-bound).
    host_bound = steps.assign(wait_ms=0.0, launch_ms=10.0)
    assert own_gpu_ms(host_bound)[0] == pytest.approx(5.0)


def test_tick_host_pairs_launch_with_the_commit_that_shares_its_tick():
    steps = pd.DataFrame(
        dict(step=[0, 1, 2], kind="decode", plan_ms=0.1, launch_ms=0.2, finalize_ms=0.1,
             commit_ms=[1.5, 2.5, 3.5], wait_ms=[1.0, 2.0, 3.0], period_ms=[2.0, 2.0, None])
    )  # fmt: skip
    # Each tick: 0.4 named + 0.5 of commit work; the period leaves 2.0 - wait - 0.9 unnamed: 0.1 and
    # -0.9.
    assert tick_host_ms(steps, 1).tolist() == pytest.approx([0.9, 0.9, 0.9])
    # Depth 2's first tick commits nothing; the loop code is the run's mean (clipped at zero).
    assert tick_host_ms(steps, 2).tolist() == pytest.approx([0.4, 0.9, 0.9])


def test_depth_two_hides_the_host_under_the_step_before():
    """max(gpu_t, host_t+1): a 30 ms prefill launch hides the decode before it; the decodes after it
    run at their GPU time; the first tick, the last step and the time outside the steps add up as
    measured."""
    steps = frame(
        [d1_step(0, **DECODE), d1_step(1, "prefill", 1, PREFILL_LAUNCH, 2.0, paced=True),
         d1_step(2, **DECODE), d1_step(3, **DECODE)]
    )  # fmt: skip
    period = steps["period_ms"].fillna(5.0 + HOST)  # the last step lasts its GPU and host work
    costs = RunCosts.measure(steps, wall_s=(HOST + period.sum() + 7.0) / 1e3, depth=1)
    assert costs.overhead_ms == pytest.approx(
        7.0
    )  # the wall less the first tick, periods, last step
    prefill_tick = PLAN + PREFILL_LAUNCH + FINALIZE + COMMIT
    own_prefill = FINALIZE + 0.01
    expected = 7.0 + HOST + prefill_tick + max(own_prefill, HOST) + 5.0 + (5.0 + HOST)
    assert pipelined_wall_ms(steps, costs) == pytest.approx(expected)
    # A step launched after a tick with nothing to launch waits for the commit before it.
    serial = steps.assign(serial=[True, True, False, False])
    assert pipelined_wall_ms(serial, costs) - pipelined_wall_ms(steps, costs) == pytest.approx(
        5.0 + prefill_tick - FINALIZE - prefill_tick
    )
    # A window: its periods only.
    window = RunCosts.measure(steps, None, 1, window=True)
    assert pipelined_wall_ms(steps, window, tail=False) == pytest.approx(
        expected - 7.0 - HOST - 5.4
    )


def test_depth_two_admits_one_decode_step_later_without_the_requests():
    """A trimmed trace has no requests to replay: depth 1's decode, prefill, decode, prefill runs as
    decode, decode, prefill, prefill."""
    kinds = ["prefill", "decode", "prefill", "decode", "prefill", "decode", "decode"]
    prefill = dict(rows=1, launch=PREFILL_LAUNCH, gpu=2.0, paced=True)
    steps = frame(
        [d1_step(i, **(DECODE if k == "decode" else dict(kind=k, **prefill))) for i, k in
         enumerate(kinds)]
    )  # fmt: skip
    assert depth2_order(steps)["step"].tolist() == [0, 1, 3, 2, 4, 5, 6]


def pair(costs1: LoopCosts, costs2: LoopCosts | None = None, **workload):
    """A simulated depth-1 / depth-2 pair on the same requests, and the model's prediction of it."""
    one = simulate_run(1, costs=costs1, **workload)
    two = simulate_run(2, costs=costs2 or costs1, **workload)
    run = one["run"]
    whole = predict_pair_wall(
        one["steps"], run["wall_s"], two["steps"], two["run"]["wall_s"],
        requests=requests_from_table(one["requests"]), streams=run["streams"],
        limits=Limits(run["max_num_seqs"], run["max_num_batched_tokens"], run["max_model_len"]),
    )  # fmt: skip
    return whole, {name: (getattr(whole, name) - 1) * 100 for name in
                   ("observed", "predicted", "predicted_d1")}  # fmt: skip


WORKLOAD = dict(streams=8, requests=32, output_len=40)
BASE = LoopCosts(fwd_base=1.0)


@pytest.mark.parametrize(
    "costs, workload, within",
    [
        (BASE, dict(streams=1, requests=4, output_len=64), 0.5),
        (BASE, dict(streams=32, requests=128, output_len=64), 0.3),
        (LoopCosts(fwd_base=1.0, mask_per_row=0.01), dict(WORKLOAD, constrained=True), 0.3),
        (BASE, dict(WORKLOAD, stop_share=0.5), 0.3),
        (LoopCosts(fwd_base=1.0, handoff=0.01, loop=0.05, startup=3.0), WORKLOAD, 0.3),
        (LoopCosts(fwd_base=1.0, prefill_launch_per_token=0.05), WORKLOAD, 0.7),
    ],
    ids=["one-stream", "32-streams", "constrained", "eos-stops", "handoff-loop-startup", "eager"],
)
def test_the_model_tracks_the_simulated_wall_clock(costs, workload, within):
    whole, pct = pair(costs, **workload)
    assert whole.schedule_match and whole.replayed
    assert pct["predicted"] == pytest.approx(pct["observed"], abs=within)
    # The terms after "admission" take the prediction from depth 1 alone to the model, one measured
    # piece at a time ("admission" is what the replayed schedule changed against depth 1's own
    # sequence).
    assert list(whole.terms_pts) == list(TERMS)
    gap = sum(whole.terms_pts[t] for t in TERMS[1:])
    assert pct["predicted_d1"] + gap == pytest.approx(pct["predicted"])


def test_a_handoff_only_depth_two_shows_is_the_gap_depth_one_alone_misses():
    whole, pct = pair(LoopCosts(fwd_base=1.0, handoff=0.01), **WORKLOAD)
    # 0.01 ms before each of a step's two ops, 0.02 of ~1.2 ms: depth 1 alone overshoots by ~1.8
    # points.
    assert pct["predicted_d1"] - pct["observed"] == pytest.approx(1.8, abs=0.4)
    assert whole.terms_pts["handoff"] == pytest.approx(-1.8, abs=0.4)
    assert pct["predicted"] == pytest.approx(pct["observed"], abs=0.3)


@pytest.mark.parametrize(
    "depth2, term",
    [
        (LoopCosts(fwd_base=1.0, gpu_speed=1.05), "forward"),  # a 5% slower depth-2 GPU
        (
            LoopCosts(fwd_base=0.2, plan=0.2, host_speed=0.8),
            "host",
        ),  # a 20% faster host, host-bound
    ],
    ids=["forward-tax", "faster-host"],
)
def test_a_piece_that_differs_between_runs_is_measured_not_assumed(depth2, term):
    """Depth 1 alone cannot know that the depth-2 run's GPU or host was slower or faster: it misses
    by several points. The model reads the piece off the depth-2 run's own steps, and its term
    accounts for
    the miss."""
    depth1 = LoopCosts(fwd_base=depth2.fwd_base, plan=depth2.plan)
    whole, pct = pair(depth1, depth2, **WORKLOAD)
    miss = pct["observed"] - pct["predicted_d1"]
    assert abs(miss) > 4.0
    assert whole.terms_pts[term] == pytest.approx(miss, abs=1.0)
    assert pct["predicted"] == pytest.approx(pct["observed"], abs=1.0)  # host-bound: max law, ~0.7


def test_results_json_gz_is_read(tmp_path):
    steps = frame([d1_step(i, **DECODE) for i in range(3)])
    runs = pd.DataFrame(
        [dict(run_id="r", depth=1, streams=4, device="cpu", mean_generated_len=3.0, wall_s=0.1,
              generated_tokens=12)]
    )  # fmt: skip
    path = write_results(tmp_path, runs, steps)
    assert path.name == "results.json.gz" and not (tmp_path / "results.json").exists()
    assert read_results(tmp_path).steps["step"].tolist() == [0, 1, 2]
    # A plain results.json, as sweeps wrote it before, is read; writing again replaces it.
    (tmp_path / "results.json").write_bytes(gzip.decompress(path.read_bytes()))
    path.unlink()
    assert read_results(tmp_path).steps["step"].tolist() == [0, 1, 2]
    write_results(tmp_path, runs, steps.iloc[:2])
    assert not (tmp_path / "results.json").exists()
    assert read_results(tmp_path).steps["step"].tolist() == [0, 1]
    (tmp_path / "results.json.gz").write_bytes(b"not gzip")
    with pytest.raises(BubblelabError, match="not valid"):
        read_results(tmp_path)


SWEEP = Path(__file__).parents[1] / "docs" / "measurements" / "h200-sweep"
needs_sweep = pytest.mark.skipif(
    not (SWEEP / "qwen3-1.7b").is_dir(), reason="H200 sweep not in this checkout"
)


@needs_sweep
@pytest.mark.parametrize("name", ["qwen3-0.6b", "qwen3-1.7b", "qwen3-4b", "smollm2-135m"])
def test_whole_run_model_on_the_schema_1_h200_sweep(name):
    """Development data (docs/costmodel-heldout.md): the earlier engine, host-bound eager prefills.
    The model (both runs' pieces) lands within 0.3 points on every row; from depth 1 alone the
    schedule is
    replayed exactly, and the misses are the depth-2 runs' own host speed (term_host_pts)."""
    results = read_results(SWEEP / name)
    table = predict_runs(results.runs, results.steps, results.requests, n_boot=50)
    assert list(table["streams"]) == [1, 8, 32, 64] and (table["pairs"] == 3).all()
    assert (table["wall_error_pts"].abs() < 0.3).all()
    assert (table["schedule_match"] == 1.0).all()
    # The terms account for the gap between the two predictions (means over pairs of pooled ratios:
    # not exactly additive, within 0.1 point; the median pair moves by a rank, not additively).
    table = predict_runs(
        results.runs, results.steps, results.requests, n_boot=50, statistic="pooled"
    )
    terms = table[[f"term_{t}_pts" for t in TERMS[1:]]].sum(axis=1)
    gap = table["wall_predicted_pct"] - table["wall_d1_predicted_pct"]
    assert np.abs(terms - gap).max() < 0.1


@needs_sweep
def test_merged_sweep_keeps_its_directories_apart():
    """qwen3-0.6b with and without the grammar share model, streams and request counts: merged, they
    must
    not pair up across directories (nor collide on run ids)."""
    named = {name: read_results(SWEEP / name) for name in ("qwen3-0.6b", "qwen3-0.6b-detect")}
    merged = merge_results(named)
    assert merged.runs["run_id"].is_unique
    assert set(merged.steps["run_id"]) <= set(merged.runs["run_id"])
    assert set(merged.requests["run_id"]) <= set(merged.runs["run_id"])
    pairs = pair_runs(merged.runs)
    assert len(pairs) == 4 + 2
    assert all(
        d1["preset"].nunique() == 1 and set(d1["preset"]) == set(d2["preset"]) for d1, d2 in pairs
    )


def test_the_forecast_from_depth_one_honours_arrivals():
    """Poisson arrivals (issue #25: the held-out arrivals sweep missed by 4-21 points): a request
    arriving every 10 ms, each 5 steps of ~5.3 ms at depth 1. A faster loop cannot admit a request
    before it arrives: the run lasts until the last arrival has been served, so depth 2 gains at
    most its per-step saving (and its admission one tick later may cost it that). Replayed as a
    closed loop, the same requests would all be admitted at once: a run a fraction as long."""
    limits = Limits(16, 8192, 128)
    arriving = [Request(4, 5, 5, arrival_ms=1.0 + 10.0 * i) for i in range(12)]
    period = PLAN + DECODE["launch"] + FINALIZE + COMMIT + DECODE["gpu"] - FINALIZE  # 5.3 ms
    depth1 = record(arriving, 16, 1, limits, lambda *_: period)
    assert depth1.idle_ms == pytest.approx(1.0)  # only before the first arrival: never emptied
    rows = [d1_step(i, kind, int(rows), DECODE["launch"], DECODE["gpu"])
            for i, (kind, rows) in enumerate(zip(depth1.steps["kind"], depth1.steps["batch_size"],
                                                 strict=True))]  # fmt: skip
    steps1 = frame(rows)
    wall1_ms = 1.0 + HOST + steps1["period_ms"].sum() + DECODE["gpu"] + HOST
    steps2 = steps1.assign(depth=2)

    def forecast(requests) -> float:
        whole = predict_pair_wall(steps1, wall1_ms / 1e3, steps2, wall1_ms / 1e3,
                                  requests=requests, streams=16, limits=limits)  # fmt: skip
        return whole.from_d1_ms

    timed = forecast(arriving)
    last_served = arriving[-1].arrival_ms + 5 * DECODE["gpu"]  # its 5 steps at their GPU time
    assert timed >= last_served
    assert abs(wall1_ms / timed - 1) <= period / DECODE["gpu"] - 1  # within the per-step gain
    closed = forecast([replace(r, arrival_ms=0.0) for r in arriving])
    assert wall1_ms / closed - 1 > 0.5  # what ignoring the arrivals forecast
