"""costmodel.carried: the forecast from depth 1 with the hand-over measured on the other
configurations' depth-2 runs. Checked on a recorded sweep (docs/measurements/h200-sweep/qwen3-0.6b:
four stream counts, three pairs each): what is carried is the others' median, never the row's own,
and carrying nothing gives back the forecast from depth 1 alone."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bubblelab.core.steady import steady_state
from bubblelab.costmodel.carried import handoffs, own_handoff_ms, with_carried_handoff
from bubblelab.costmodel.configs import pair_runs
from bubblelab.costmodel.costs import handoff_ms, launched
from bubblelab.costmodel.predict import predict_runs
from bubblelab.costmodel.wholerun import predict_pair_wall
from bubblelab.runs.rundir import read_results

SWEEP = Path(__file__).parents[1] / "docs" / "measurements" / "h200-sweep" / "qwen3-0.6b"
pytestmark = pytest.mark.skipif(not SWEEP.is_dir(), reason="H200 sweep not in this checkout")


@pytest.fixture(scope="module")
def sweep():
    return read_results(SWEEP)


def carried_table(r, steps=None):
    steps = r.steps if steps is None else steps
    table = predict_runs(r.runs, steps, r.requests, n_boot=20)
    return with_carried_handoff(table, r.runs, steps, r.requests)


def test_each_row_carries_the_median_of_the_others(sweep):
    own = handoffs(sweep.runs, sweep.steps)
    assert len(own) == 4 and all(m == ("NVIDIA H200", 1) for _, m, _ in own)
    table = carried_table(sweep)
    for label, _, _ in own:
        others = [ms for o, _, ms in own if o != label]
        row = table[table["label"] == label].iloc[0]
        assert row["carried_handoff_ms"] == pytest.approx(float(np.median(others)))
    # the hand-over is depth 2's GPU idle between queued steps: ~0.01 ms on this H200, every row
    assert all(0.005 < ms < 0.02 for _, _, ms in own)


def test_own_hand_over_is_the_median_queued_bubble_brute_force(sweep):
    """By hand: a steady step whose host still waited at its end (wait > bubble) was queued, so its
    bubble was the GPU's own; the run's hand-over is their median, the configuration's the median
    over its depth-2 runs."""
    for _, d2 in pair_runs(sweep.runs):
        each = []
        for run_id in d2["run_id"]:
            steps = steady_state(launched(sweep.steps[sweep.steps["run_id"] == run_id]))
            queued = [b for b, w in zip(steps["bubble_ms"], steps["wait_ms"], strict=True) if w > b]
            each.append(float(np.median(queued)))
            assert handoff_ms(launched(sweep.steps[sweep.steps["run_id"] == run_id])) == each[-1]
        assert own_handoff_ms(d2, sweep.steps) == pytest.approx(float(np.median(each)))


def test_a_rows_own_depth_2_runs_are_never_read(sweep):
    """Make one configuration's depth-2 hand-over ten times longer: its own forecast must not move
    (the others' do: they carry it)."""
    table = carried_table(sweep)
    d1, d2 = pair_runs(sweep.runs)[0]
    label = table["label"].iloc[0]
    steps = sweep.steps.copy()
    mine = steps["run_id"].isin(d2["run_id"])
    steps.loc[mine, "bubble_ms"] *= 10.0
    again = carried_table(sweep, steps)
    same = again[again["label"] == label].iloc[0]
    before = table[table["label"] == label].iloc[0]
    assert same["wall_d1h_predicted_pct"] == before["wall_d1h_predicted_pct"]
    assert same["carried_handoff_ms"] == before["carried_handoff_ms"]
    others = again["label"] != label
    assert (
        again.loc[others, "carried_handoff_ms"] >= table.loc[others, "carried_handoff_ms"]
    ).all()


def test_carrying_nothing_is_the_forecast_from_depth_1_alone(sweep):
    d1, d2 = pair_runs(sweep.runs)[1]
    r1, r2 = d1.iloc[0], d2.iloc[0]
    whole = predict_pair_wall(
        sweep.steps[sweep.steps["run_id"] == r1["run_id"]], r1["wall_s"],
        sweep.steps[sweep.steps["run_id"] == r2["run_id"]], r2["wall_s"],
        requests=None, streams=int(r1["streams"]), limits=None, carried_handoff_ms=0.0,
    )  # fmt: skip
    assert whole.from_d1_carried_ms == pytest.approx(whole.from_d1_ms)
    longer = predict_pair_wall(
        sweep.steps[sweep.steps["run_id"] == r1["run_id"]], r1["wall_s"],
        sweep.steps[sweep.steps["run_id"] == r2["run_id"]], r2["wall_s"],
        requests=None, streams=int(r1["streams"]), limits=None, carried_handoff_ms=0.05,
    )  # fmt: skip
    assert longer.from_d1_carried_ms > whole.from_d1_ms  # a hand-over only lengthens depth 2


def test_a_lone_configuration_has_nothing_to_carry(sweep):
    d1, d2 = pair_runs(sweep.runs)[0]
    runs = sweep.runs[sweep.runs["run_id"].isin([*d1["run_id"], *d2["run_id"]])]
    table = predict_runs(runs, sweep.steps, sweep.requests, n_boot=20)
    out = with_carried_handoff(table, runs, sweep.steps, sweep.requests)
    assert out["carried_handoff_ms"].isna().all() and out["wall_d1h_predicted_pct"].isna().all()
    # another sweep's hand-over on the same machine fills it; another machine's does not
    here = with_carried_handoff(table, runs, sweep.steps, sweep.requests,
                                elsewhere=[(("NVIDIA H200", 1), 0.012)])  # fmt: skip
    assert here["carried_handoff_ms"].tolist() == [0.012]
    foreign = [(("NVIDIA H100 80GB HBM3", 1), 0.012), (("NVIDIA H200", 2), 0.02)]
    there = with_carried_handoff(table, runs, sweep.steps, sweep.requests, elsewhere=foreign)
    assert pd.isna(there["carried_handoff_ms"].iloc[0])


def test_the_carried_miss_has_its_interval_over_pairs(sweep):
    """wall_d1h_error_lo / _hi: a percentile interval over resampled pairs of observed − carried
    forecast, both taken over the same pairs; it holds the point miss."""
    table = carried_table(sweep)
    assert table[["wall_d1h_error_lo", "wall_d1h_error_hi"]].notna().all().all()
    for row in table.to_dict("records"):
        miss = row["wall_d1h_error_pts"]
        assert row["wall_d1h_error_lo"] - 1e-9 <= miss <= row["wall_d1h_error_hi"] + 1e-9
    # another seed and more resamples: still an interval
    again = with_carried_handoff(
        predict_runs(sweep.runs, sweep.steps, sweep.requests, n_boot=20), sweep.runs,
        sweep.steps, sweep.requests, seed=1, n_boot=2000,
    )  # fmt: skip
    wide = (again["wall_d1h_error_hi"] - again["wall_d1h_error_lo"]).to_numpy()
    assert (wide >= 0).all() and np.isfinite(wide).all()
