"""Across cards (costmodel.crossgpu): card B's depth-2 speedup forecast from card A's depth-1 run,
on simulated cards whose GPU and host speeds differ by known factors."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from bubblelab.costmodel.crossgpu import DeviceRatio, depth1_wall_ms, predict_across
from bubblelab.costmodel.predict import predict_runs
from bubblelab.costmodel.simulate import LoopCosts, simulate_run
from bubblelab.runs.rundir import write_results
from tests.cli_helpers import run_bubblelab

A = LoopCosts(fwd_base=1.2)
# Card B: a GPU twice as fast at every step and a host 20% faster, noise and all (the same seeds):
# the assumptions hold exactly.
SCALED = LoopCosts(fwd_base=1.2, gpu_speed=0.5, host_speed=0.8)
# Card C: decode twice as fast but prefill barely faster (its per-token cost stays), a host 20%
# faster, noisier: one ratio for every step no longer holds.
UNEVEN = LoopCosts(fwd_base=0.6, fwd_per_row=0.01, sampling=0.075, prefill_base=0.5,
                   host_speed=0.8, jitter=0.05)  # fmt: skip


def card(name: str, costs: LoopCosts, streams=(2, 16), pairs: int = 6):
    runs, steps, requests = [], [], []
    for s in streams:
        for repeat in range(pairs):
            for depth in (1, 2):
                r = simulate_run(depth, streams=s, requests=4 * s, output_len=40, costs=costs,
                                 seed=100 * s + repeat, repeat=repeat,
                                 run_id=f"{name}-s{s}-r{repeat}-d{depth}")  # fmt: skip
                runs.append({**r["run"], "device": f"card {name}"})
                steps.append(r["steps"])
                requests.append(r["requests"])
    return pd.DataFrame(runs), pd.concat(steps), pd.concat(requests)


@pytest.fixture(scope="module")
def cards():
    return {name: card(name, costs) for name, costs in (("A", A), ("B", SCALED), ("C", UNEVEN))}


def test_the_ratios_are_read_off_the_two_cards_depth1_runs(cards):
    a, b = cards["A"], cards["B"]
    one = lambda c, s: c[1][c[1]["run_id"].str.contains(f"-s{s}-") & (c[1]["depth"] == 1)]  # noqa: E731
    ratio = DeviceRatio.measured(one(a, 16), one(b, 16))
    assert ratio.gpu == pytest.approx(0.5, abs=0.01) and ratio.host == pytest.approx(0.8, abs=0.01)


def test_depth1_wall_scales_to_itself_at_ratio_one(cards):
    runs, steps, _ = cards["A"]
    run = runs[runs["depth"] == 1].iloc[0]
    mine = steps[steps["run_id"] == run["run_id"]]
    assert depth1_wall_ms(mine, run["wall_s"], DeviceRatio(1, 1)) == pytest.approx(
        run["wall_s"] * 1e3
    )


def across_and_own(cards, source: str, target: str):
    across = predict_across(cards[source], cards[target], n_boot=200).set_index("label")
    own = predict_runs(*cards[target], n_boot=50).set_index("label")
    assert list(across.index) == list(own.index) and len(across) == 2
    assert (across["from_device"] == f"card {source}").all()
    assert (across["observed_pct"] == own["observed_pct"]).all()  # the target's own pairs
    assert (across["across_predicted_lo"] <= across["across_predicted_pct"]).all()
    assert (across["across_predicted_pct"] <= across["across_predicted_hi"]).all()
    return across, own


@pytest.mark.parametrize(("source", "target"), [("A", "B"), ("B", "A")])
def test_where_the_cards_differ_by_one_ratio_the_forecast_is_the_same_cards(cards, source, target):
    """Both ways: A's depth-1 run scaled to B forecasts B's speedup as B's own depth-1 run does,
    though the faster GPU makes B's win much larger than A's."""
    across, own = across_and_own(cards, source, target)
    assert across["across_predicted_pct"].to_numpy() == pytest.approx(
        own["wall_d1_predicted_pct"].to_numpy(), abs=0.05
    )
    mine = predict_runs(*cards[source], n_boot=50)["observed_pct"].to_numpy()
    assert abs(mine - across["observed_pct"].to_numpy()).min() > 10


@pytest.mark.parametrize(("source", "target"), [("A", "C"), ("C", "A")])
def test_a_prefill_that_scales_apart_is_where_it_stops_holding(cards, source, target):
    """The ratio is read at steady decode steps: prefills that do not speed up alike move the
    forecast by what they weigh in the run, more at 16 streams than at 2."""
    across, own = across_and_own(cards, source, target)
    gap = (across["across_error_pts"] - own["wall_d1_error_pts"]).abs()
    two, sixteen = (gap[gap.index.str.endswith(f" {s} streams")].iloc[0] for s in (2, 16))
    assert two < 0.8 and 0.5 < sixteen < 2.5 and sixteen > two


def test_predict_from_one_run_directory_to_another(cards, tmp_path):
    for name in ("A", "B"):
        write_results(tmp_path / name, cards[name][0], cards[name][1],
                      requests_df=cards[name][2])  # fmt: skip
    done = run_bubblelab("predict", "--from", str(tmp_path / "A"), "--to", str(tmp_path / "B"),
                         "--json", "--n-boot", "50")  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert [r["label"] for r in rows] == ["sim · card B · 2 streams", "sim · card B · 16 streams"]
    assert all(r["gpu_ratio"] == pytest.approx(0.5, abs=0.01) for r in rows)
    shown = run_bubblelab("predict", "--from", str(tmp_path / "A"), "--to", str(tmp_path / "B"),
                          "--n-boot", "50", columns=200)  # fmt: skip
    assert "forecast from this card's depth-1 runs" in shown.stdout and "card A" in shown.stdout
    alone = run_bubblelab("predict", "--from", str(tmp_path / "A"))
    assert alone.returncode == 2 and "--to" in alone.stderr
