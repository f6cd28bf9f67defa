"""The forecast from depth-1 runs alone (costmodel.forecast): the figure predict sets beside the
observed speedup, made where no depth-2 run exists, and never reading one."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from rich.console import Console

from bubblelab.cli.predict import unpaired
from bubblelab.cli.predict_tables import depth1_table
from bubblelab.costmodel.forecast import FORECAST, forecast_runs, one_depth
from bubblelab.costmodel.predict import predict_runs
from bubblelab.costmodel.simulate import simulate_run
from bubblelab.report.report import render_report
from bubblelab.runs.rundir import Results


@pytest.fixture(scope="module")
def runs() -> dict[str, pd.DataFrame]:
    """Two configurations, 4 repeat pairs each."""
    frames: dict[str, list] = {"runs": [], "steps": [], "requests": [], "timeline": []}
    for streams in (2, 8):
        for repeat in range(4):
            for depth in (1, 2):
                r = simulate_run(depth, streams=streams, requests=3 * streams, output_len=24,
                                 seed=10 * streams + repeat, repeat=repeat,
                                 run_id=f"s{streams}-r{repeat}-d{depth}")  # fmt: skip
                frames["runs"].append(pd.DataFrame([r["run"]]))
                for key in ("steps", "requests", "timeline"):
                    frames[key].append(r[key])
    return {k: pd.concat(v, ignore_index=True) for k, v in frames.items()}


def depth1(runs: dict) -> dict:
    keep = runs["runs"]["depth"] == 1
    ids = set(runs["runs"].loc[keep, "run_id"])
    return {k: v[v["run_id"].isin(ids)] for k, v in runs.items()}


def test_it_is_predicts_forecast_without_the_depth2_runs(runs):
    paired = predict_runs(runs["runs"], runs["steps"], runs["requests"], n_boot=200)
    alone = forecast_runs(**{k: v for k, v in depth1(runs).items() if k != "timeline"}, n_boot=200)
    assert list(alone.columns[: len(FORECAST)]) == list(FORECAST)
    assert list(alone["label"]) == list(paired["label"])
    np.testing.assert_allclose(alone["wall_d1_predicted_pct"], paired["wall_d1_predicted_pct"])
    assert (alone["repeats"] == paired["pairs"]).all()
    # a pipelined loop is faster here, and the forecast's rates say by as much as its speedup
    assert (alone["wall_d1_predicted_pct"] > 5).all()
    gain = alone["tokens_per_s_forecast"] / alone["tokens_per_s_d1"]
    np.testing.assert_allclose(100 * (gain - 1), alone["wall_d1_predicted_pct"], rtol=1e-9)
    # with depth 2 there too, it is the same: nothing of depth 2 is read
    both = forecast_runs(runs["runs"], runs["steps"], runs["requests"], n_boot=200)
    pd.testing.assert_frame_equal(both, alone)


def test_one_repeat_has_no_interval_and_is_marked_unknown(runs):
    one = depth1(runs)
    first = one["runs"]["repeat"] == 0
    table = forecast_runs(one["runs"][first], one["steps"], one["requests"], n_boot=50)
    assert (table["repeats"] == 1).all() and table["wall_d1_predicted_lo"].isna().all()
    console = Console(record=True, width=240)
    console.print(depth1_table(table))
    shown = console.export_text()
    assert shown.count("% ?") == 2 and "not yet checked" in shown


def test_the_message_and_the_page_say_it_is_unchecked(runs, tmp_path):
    one = depth1(runs)
    assert one_depth(one["runs"]) == 1 and one_depth(runs["runs"]) is None
    said = unpaired([tmp_path], one["runs"])
    assert "forecast above is from depth 1 alone" in said and "--depth 1,2" in said
    two = runs["runs"][runs["runs"]["depth"] == 2]
    assert "a forecast is made from depth-1 runs, so run both" in unpaired([tmp_path], two)
    empty = pd.DataFrame()
    results = Results(runs=one["runs"], steps=one["steps"], attribution=empty, gaps=empty,
                      provenance={}, timeline=one["timeline"], requests=one["requests"],
                      ranks=empty, rank_attribution=empty)  # fmt: skip
    page = " ".join(render_report(results, "d1", n_boot=50).split())
    table = forecast_runs(one["runs"], one["steps"], one["requests"], n_boot=50)
    for r in table.itertuples():
        assert f"{r.wall_d1_predicted_pct:+.1f}%" in page
    assert page.count("not yet checked: no depth-2 run was measured") == 2
    assert "No configuration was measured at both depths" not in page
