"""The cost model on synthetic frames shaped like the contract (docs/phases.md)."""

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bubblelab.core.contract import STEP_COLUMNS
from bubblelab.core.errors import BubblelabError
from bubblelab.core.steady import steady_state
from bubblelab.costmodel.configs import run_label
from bubblelab.costmodel.model import (
    VLLM_BUCKETS,
    StepCost,
    graph_bucket,
    whatif_curve,
    whatif_speedup,
    zombie_tax,
)
from bubblelab.costmodel.predict import predict_runs
from bubblelab.costmodel.simulate import LoopCosts, simulate_run
from bubblelab.runs.rundir import RUN_COLUMNS, load_runs, read_results, write_results


@pytest.fixture(scope="module")
def sim():
    runs, steps, timelines, requests = [], [], [], []
    for streams in (1, 8):
        for depth in (1, 2):
            r = simulate_run(
                depth,
                streams=streams,
                requests=4 * streams,
                output_len=48,
                costs=LoopCosts(fwd_base=1.0),
                seed=streams,
            )
            runs.append(r["run"])
            steps.append(r["steps"])
            timelines.append(r["timeline"])
            requests.append(r["requests"])
    return (
        pd.DataFrame(runs),
        pd.concat(steps, ignore_index=True),
        pd.concat(timelines, ignore_index=True),
        pd.concat(requests, ignore_index=True),
    )


def test_graph_bucket_pads_to_vllm_sizes():
    assert [graph_bucket(b) for b in (0, 1, 3, 5, 8, 9, 31, 33)] == [0, 1, 4, 8, 8, 16, 32, 40]
    assert graph_bucket(5, buckets=None) == 5
    assert graph_bucket(10_000) == 10_000  # past the largest graph: eager, unpadded


@given(
    L=st.floats(2, 2000),
    streams=st.integers(1, 256),
    base=st.floats(0.1, 10),
    per_row=st.floats(0, 1),
)
def test_zombie_tax_bounds(L, streams, base, per_row):
    """Weights + per-row work (concave, g(0) = 0) gives 0 <= z <= 1/L; with graph buckets, a zombie
    that fits the padding of its step's bucket is free."""
    rows = range(1, 257)
    eager = StepCost.from_points(rows, [base + per_row * r for r in rows], buckets=None)
    assert 0.0 <= zombie_tax(L, streams, eager) <= 1.0 / L + 1e-12
    padded = StepCost(eager.rows, eager.ms, VLLM_BUCKETS)
    if streams > 1 and graph_bucket(streams - 1) == graph_bucket(streams):
        assert zombie_tax(L, streams, padded) == 0.0


def test_zombie_tax_limits():
    flat = StepCost.from_points([1, 8, 32], [5.0, 5.0, 5.0])
    linear = StepCost.from_points(range(1, 65), [0.5 * b for b in range(1, 65)], buckets=None)
    assert zombie_tax(100, 1, flat) == pytest.approx(0.01)  # one stream: a whole wasted step
    assert zombie_tax(100, 16, flat) == 0.0  # memory bound: the zombie rides free
    assert zombie_tax(100, 16, linear) == pytest.approx(0.01)  # compute bound: it costs its share
    # Crossing a bucket boundary is the expensive case: 9 rows run the 16-row graph, 8 rows the
    # 8-row one.
    steep = StepCost.from_points([8, 16], [4.0, 6.0])
    assert zombie_tax(100, 9, steep) > zombie_tax(100, 8, steep) == 0.0


def test_whatif_peaks_where_gpu_time_equals_host_time():
    k = np.logspace(-2, 2, 401)
    s = whatif_speedup(k, gpu_ms=2.0, exposed_ms=0.5, z=0.0)
    assert k[np.argmax(s)] == pytest.approx(0.25, rel=0.03)  # k * gpu == host
    assert s.max() == pytest.approx(2.0, rel=0.01)  # host and GPU fully overlapped
    assert s[-1] == pytest.approx(1.0, abs=0.01)  # huge forward: nothing left to hide
    assert whatif_speedup(1.0, 2.0, 0.5, z=0.0) == pytest.approx(1.25)


@pytest.mark.parametrize(
    "blocking, pipelined, gpu, host",
    [
        (5.44, 5.10, 5.07, 0.37),  # the post's 3090
        (3.41, 1.44, 1.42, 0.10),  # unexplained idle
        (1.53, 1.17, 1.16, 0.45),
    ],
)  # host partly hidden
def test_whatif_curve_goes_through_the_measured_point(blocking, pipelined, gpu, host):
    curve = whatif_curve(blocking, pipelined, gpu, host, z=0.01).set_index("k")
    assert curve.loc[1.0, "speedup_pct"] == pytest.approx((blocking / pipelined * 0.99 - 1) * 100)
    assert curve["speedup_pct"].iloc[-1] < curve.loc[1.0, "speedup_pct"]  # slower GPU: less to win


def test_simulated_frames_follow_the_contract(sim):
    runs, steps, _, requests = sim
    assert list(steps.columns) == list(STEP_COLUMNS) and set(RUN_COLUMNS) <= set(runs.columns)
    d1 = steps[steps.run_id == "sim-d1-s1-1"]
    d2 = steps[steps.run_id == "sim-d2-s1-1"]
    # Capped requests leave no zombie (the scheduler knows the cap was launched): the same steps at
    # both depths.
    assert (d2.kind == "decode").sum() == (d1.kind == "decode").sum()
    assert steady_state(d2)["bubble_ms"].median() < 0.05 < steady_state(d1)["bubble_ms"].median()
    mine = requests[requests.run_id == "sim-d1-s8-8"]
    assert (
        len(mine) == 32
        and mine.output_len.sum() == runs.set_index("run_id").generated_tokens["sim-d1-s8-8"]
    )


def test_predictions_match_the_simulated_loop(sim):
    runs, steps, _, requests = sim
    table = predict_runs(runs, steps, requests, n_boot=200).set_index("streams")
    assert list(table.index) == [1, 8]
    for _streams, row in table.iterrows():
        assert row.predicted_lo <= row.predicted_pct <= row.predicted_hi
        assert row.pairs == 1 and np.isnan(row.observed_lo) and not row.observed_known
        # Depth 1 alone predicts the pipelined period: GPU-bound here, so forward + sampling.
        assert row.d1_pipelined_ms == pytest.approx(row.pipelined_ms, rel=0.05)
        # The whole-run model (prefill, ramp-down, admission) tracks the wall clock to half a point,
        # from depth 1 alone too (the simulated host is equally fast in both runs). At one stream
        # each admission follows a tick with nothing to launch, whose plan (0.1 ms here, ~0.01 ms on
        # the engine) the per-step table books on the step after it: counted as exposed once too
        # often.
        assert row.wall_predicted_pct == pytest.approx(row.observed_pct, abs=0.5)
        assert row.wall_d1_predicted_pct == pytest.approx(row.observed_pct, abs=1.0)
        assert row.schedule_match == 1.0 and row.replayed
    # ...while the steady-state ratio overshoots once prefill and ramp-down weigh on a short run.
    assert table.loc[8, "predicted_pct"] > table.loc[8, "observed_pct"] + 1


def test_whole_run_with_host_bound_ticks():
    """When the host tick outlasts the forward, depth 2 is host-bound: T_pipe = host critical path.
    Around a prefill (GPU-bound) in a host-bound loop the host gets one tick ahead, which
    max(gpu_t, host_t+1) does not credit: 1.3 points here (1.6 from depth 1 alone)."""
    costs = LoopCosts(
        fwd_base=0.2,
        fwd_per_row=0.0,
        sampling=0.05,
        plan=0.2,
        launch=0.2,
        commit=0.2,
        finalize=0.1,
        jitter=0.0,
    )
    d1, d2 = (simulate_run(d, streams=4, requests=8, output_len=40, costs=costs) for d in (1, 2))
    runs = pd.DataFrame([d1["run"], d2["run"]])
    steps = pd.concat([d1["steps"], d2["steps"]])
    row = predict_runs(runs, steps, pd.concat([d1["requests"], d2["requests"]]), n_boot=50).iloc[0]
    assert row.wall_predicted_pct == pytest.approx(row.observed_pct, abs=1.5)
    assert row.wall_d1_predicted_pct == pytest.approx(row.observed_pct, abs=2.0)
    assert steady_state(d2["steps"])["period_ms"].median() == pytest.approx(0.7, rel=0.02)


def test_results_round_trip(tmp_path, sim):
    runs, steps, timeline, _ = sim
    attribution = pd.DataFrame(
        {"run_id": ["a"], "phase": ["commit"], "time_ms": [1.5], "began_ms": [1.5]}
    )
    write_results(tmp_path, runs, steps, attribution, None, {"command": "x"}, timeline)
    back = read_results(tmp_path)
    pd.testing.assert_frame_equal(back.runs, runs, check_dtype=False)
    assert (
        len(back.steps) == len(steps)
        and back.steps["period_ms"].isna().sum() == steps["period_ms"].isna().sum()
    )
    assert back.gaps.empty and back.provenance == {"command": "x"}
    with pytest.raises(BubblelabError, match="no results.json"):
        read_results(tmp_path / "missing")
    write_results(tmp_path, runs.drop(columns=["command", "wall_s"]), steps)
    with pytest.raises(BubblelabError, match="runs lack the column.s. wall_s"):
        read_results(tmp_path)
    write_results(tmp_path, runs.drop(columns=["command"]), steps)
    assert (
        read_results(tmp_path).runs["command"].isna().all()
    )  # optional metadata: kept as a column


def test_load_runs_from_a_duckdb_catalog(tmp_path, sim):
    import duckdb

    runs, steps, _, _ = sim
    path = tmp_path / "catalog.duckdb"
    with duckdb.connect(str(path)) as con:
        con.sql("CREATE TABLE runs AS FROM runs")
        con.sql("CREATE TABLE steps AS FROM steps")
    loaded = load_runs(path)
    assert sorted(loaded.runs["run_id"]) == sorted(runs["run_id"]) and len(loaded.steps) == len(
        steps
    )
    empty = tmp_path / "empty.duckdb"
    duckdb.connect(str(empty)).close()
    with pytest.raises(BubblelabError, match="lacks the runs/steps tables"):
        load_runs(empty)
    with pytest.raises(BubblelabError, match="does not exist"):
        load_runs(tmp_path / "nope.duckdb")
    trace = tmp_path / "d1.sqlite.gz"
    trace.write_bytes(b"")
    with pytest.raises(BubblelabError, match=r"a trace is read by `bubblelab analyze`"):
        load_runs(trace)  # `predict TRACE` points to the commands that read one


def test_repeats_pair_up_and_bootstrap_the_observed_ratio_over_pairs():
    runs, steps = [], []
    for repeat in (2, 0, 1):  # the order runs are listed in does not matter: pairs are by repeat
        for depth in (1, 2):
            r = simulate_run(
                depth,
                streams=4,
                requests=8,
                output_len=32,
                seed=10 + repeat,
                run_id=f"r{repeat}-d{depth}",
                repeat=repeat,
            )
            runs.append(r["run"])
            steps.append(r["steps"])
    row = predict_runs(pd.DataFrame(runs), pd.concat(steps), n_boot=300).iloc[0]
    assert row.runs_block == "r2-d1,r0-d1,r1-d1" and row.runs_pipe == "r2-d2,r0-d2,r1-d2"
    assert row.pairs == 3 and row.observed_lo < row.observed_pct < row.observed_hi
    assert not row.observed_known  # fewer than 5 pairs: not claimed known, however narrow


def test_a_run_without_steady_steps_is_skipped_and_named(sim):
    runs, steps, _, _ = sim
    broken = steps[~((steps.run_id == "sim-d2-s8-8") & (steps.kind == "decode"))]
    table = predict_runs(runs, broken, n_boot=50)
    assert list(table["streams"]) == [1]
    assert table.attrs["skipped"] == [
        "sim · simulated · 8 streams: no steady-state decode steps in runs sim-d1-s8-8, sim-d2-s8-8"
    ]


def test_sweeps_that_differ_only_in_the_arrival_rate_are_two_configurations():
    """Runs record their Poisson arrival rate (None: a closed loop); two run directories that
    differ only in it are two configurations, each paired and predicted on its own, never one
    whose depth-1 and depth-2 runs mix rates."""
    runs, steps = [], []
    for rate in (None, 50.0):
        for depth in (1, 2):
            r = simulate_run(depth, streams=4, requests=8, output_len=32, seed=3,
                             run_id=f"rate{rate}-d{depth}", repeat=0)  # fmt: skip
            runs.append({**r["run"], "arrival_rate": rate})
            steps.append(r["steps"])
    table = predict_runs(pd.DataFrame(runs), pd.concat(steps), n_boot=50)
    assert sorted(table["runs_block"]) == ["rate50.0-d1", "rateNone-d1"]
    assert [row.pairs for row in table.itertuples()] == [1, 1]
    assert "· 50 req/s" in run_label({**runs[2], "depth": None}, depth=False)
    assert "req/s" not in run_label(runs[0], depth=False)
