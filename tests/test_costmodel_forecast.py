"""The forecast from depth-1 runs alone (costmodel.forecast): the figure predict sets beside the
observed speedup, made where no depth-2 run exists, and never reading one."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from markupsafe import escape
from rich.console import Console

from bubblelab.cli.predict import unpaired
from bubblelab.cli.predict_tables import depth1_table
from bubblelab.costmodel.forecast import FORECAST, forecast_runs, one_depth
from bubblelab.costmodel.predict import predict_runs
from bubblelab.report.report import render_report
from bubblelab.runs.merge import merge_results
from bubblelab.runs.rundir import Results
from bubblelab.runs.split_sweep import split_line
from tests.fixture_sweeps import as_results, simulated_sweep


@pytest.fixture(scope="module")
def runs() -> dict[str, pd.DataFrame]:
    """Two configurations, 4 repeat pairs each."""
    return simulated_sweep(repeats=4)


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
    results = as_results(one)
    page = " ".join(render_report(results, "d1", n_boot=50).split())
    table = forecast_runs(one["runs"], one["steps"], one["requests"], n_boot=50)
    for r in table.itertuples():
        assert f"{r.wall_d1_predicted_pct:+.1f}%" in page
    assert page.count("not yet checked: no depth-2 run was measured") == 2
    assert "No configuration was measured at both depths" not in page
    assert "What depth 2 would buy" in page and "Prediction vs measurement" not in page


def test_the_page_takes_the_forecast_its_caller_made(runs):
    """run-and-profile at depth 1 prints the forecast and hands it to the page, which made it a
    second time before (~0.5 s): the page shows the caller's table as it is."""
    one = depth1(runs)
    table = forecast_runs(one["runs"], one["steps"], one["requests"], n_boot=50)
    table["wall_d1_predicted_pct"] = [61.7, 62.8]  # not what the runs foresee: the caller's
    page = " ".join(render_report(as_results(one), "d1", n_boot=50, depth1=table).split())
    assert "+61.7%" in page and "+62.8%" in page


def halves(runs: dict, **d2_options) -> dict[str, Results]:
    """The simulated sweep as two directories, one a depth, each with its sweep's options."""
    spec = {"model": "simulated", "dtype": "fp32", "streams": [2, 8], "repeats": 4, "seed": 0}
    out = {}
    for depth, options in ((1, {}), (2, d2_options)):
        ids = set(runs["runs"].loc[runs["runs"]["depth"] == depth, "run_id"])
        mine = {k: v[v["run_id"].isin(ids)] for k, v in runs.items()}
        out[f"d{depth}"] = as_results(mine, {"sweep": {**spec, "depths": [depth], **options}})
    return out


def test_one_sweeps_two_halves_pair_and_say_what_that_costs(runs):
    merged = merge_results(halves(runs, repeats=6, budget_s=60.0))  # how many runs: may differ
    assert merged.provenance["split_sweep"] == ["d1", "d2"]
    table = predict_runs(merged.runs, merged.steps, merged.requests, n_boot=50)
    assert list(table["label"]) == [f"d1+d2 · simulated · {n} streams" for n in (2, 8)]
    assert (table["pairs"] == 4).all()
    whole = predict_runs(runs["runs"], runs["steps"], runs["requests"], n_boot=50)
    np.testing.assert_allclose(table["observed_pct"], whole["observed_pct"])
    line = split_line(merged.provenance)
    assert line is not None and "d1 (depth 1) and d2 (depth 2) are one sweep run in two" in line
    page = " ".join(render_report(merged, "split", n_boot=50).split())
    assert escape(line) in page and "their depth 1 and depth 2 made in two sweeps" in page
    assert 'id="compare"' not in page  # one sweep: no directories to set side by side


@pytest.mark.parametrize(
    "change",
    [{"dtype": "bf16"}, {"seed": 1}, {"streams": [2]}],
    ids=["another dtype", "other requests", "other stream counts"],
)
def test_sweeps_that_differ_in_what_ran_stay_apart(runs, change):
    merged = merge_results(halves(runs, **change))
    assert "split_sweep" not in merged.provenance and split_line(merged.provenance) is None
    assert predict_runs(merged.runs, merged.steps, merged.requests, n_boot=50).empty


def test_the_committed_h200_halves_read_as_one_sweep(tmp_path):
    """docs/measurements.md §3's forecast checked later: the two results files pair, named as
    their sweeps (d1, d2), and give the figures the docs quote."""
    from pathlib import Path

    from bubblelab.report.report import report_dirs
    from bubblelab.runs.merge import distinct_names, load_sources

    folder = Path(__file__).resolve().parents[1] / "docs/measurements/2026-12-02/split-sweep"
    halves = [folder / "d1.results.json.gz", folder / "d2.results.json.gz"]
    assert distinct_names(halves) == ["d1", "d2"]
    results = load_sources(halves)
    table = predict_runs(results.runs, results.steps, results.requests, n_boot=100)
    assert [round(v, 1) for v in table["wall_d1_predicted_pct"]] == [13.2, 16.8, 21.7]
    assert [round(v, 1) for v in table["observed_pct"]] == [12.6, 16.4, 21.7]
    first = load_sources([halves[0]])  # the forecast as made before depth 2 ran
    alone = forecast_runs(first.runs, first.steps, first.requests, n_boot=100)
    np.testing.assert_allclose(alone["wall_d1_predicted_pct"], table["wall_d1_predicted_pct"])
    page = report_dirs(halves, tmp_path / "page.html", n_boot=100, export=False).read_text()
    assert "Popping the bubble · d1 · d2" in page
    assert escape(split_line(results.provenance)) in page
