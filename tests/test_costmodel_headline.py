"""The headline everywhere is the forecast from the depth-1 run alone (issue #25 item 3): perturb
every piece of the depth-2 runs but what was observed (their wall clocks and tokens), and nothing a
headline shows moves, while the models that read depth 2 (the explanation) do."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from markupsafe import escape
from rich.console import Console

from bubblelab.cli.predict_tables import explanation_table, forecast_table
from bubblelab.core.steady import steady_state
from bubblelab.costmodel.forecast import forecast_runs
from bubblelab.costmodel.headline import (
    accuracy_cells,
    headline,
    headline_frame,
    miss_text,
    noise_lines,
)
from bubblelab.costmodel.observed import median_known
from bubblelab.costmodel.predict import HEADLINE, predict_runs
from bubblelab.costmodel.spread import source_lines
from bubblelab.report.report import render_report
from tests.fixture_sweeps import as_results, simulated_sweep

ROOT = Path(__file__).resolve().parents[1]
# A depth-2 run's pieces: its GPU spans, host phases, hand-over and periods (not wall_s).
PIECES = ("forward_ms", "sampling_ms", "plan_ms", "launch_ms", "finalize_ms", "commit_ms",
          "wait_ms", "period_ms", "busy_ms", "bubble_ms")  # fmt: skip


@pytest.fixture(scope="module")
def runs():
    """Two configurations, 6 repeat pairs each."""
    return simulated_sweep(repeats=6)


def perturbed(runs: dict, factor: float = 1.3) -> dict:
    steps = runs["steps"].copy()
    depth2 = steps["depth"] == 2
    steps.loc[depth2, list(PIECES)] *= factor
    return {**runs, "steps": steps}


def table_of(runs: dict, statistic: str = "median") -> pd.DataFrame:
    return predict_runs(runs["runs"], runs["steps"], runs["requests"], n_boot=200,
                        statistic=statistic)  # fmt: skip


def text(table) -> str:
    console = Console(record=True, width=240)
    console.print(table)
    return console.export_text()


def test_no_headline_reads_the_depth2_runs_pieces(runs):
    before, after = table_of(runs), table_of(perturbed(runs))
    # The explanation reads depth 2: the perturbation reaches it...
    assert (before["wall_predicted_pct"] - after["wall_predicted_pct"]).abs().min() > 5
    assert (before["predicted_pct"] - after["predicted_pct"]).abs().min() > 5
    assert text(explanation_table(before)) != text(explanation_table(after))
    # ...and no headline: the table's first columns and JSON keys, its headline, the CLI's first
    # table, the README's first cells.
    assert list(before.columns[: len(HEADLINE)]) == list(HEADLINE)
    first = json.loads(before.to_json(orient="records"))[0]
    assert list(first)[: len(HEADLINE)] == list(HEADLINE)
    pd.testing.assert_frame_equal(headline_frame(before), headline_frame(after))
    assert headline(before) == headline(after)
    assert text(forecast_table(before)) == text(forecast_table(after))
    assert accuracy_cells(before)[:2] == accuracy_cells(after)[:2]
    assert accuracy_cells(before)[2:] != accuracy_cells(after)[2:]


def test_the_reports_headline_cards_read_depth_1_alone(runs):
    pages = [render_report(as_results(r), "sim", n_boot=200) for r in (runs, perturbed(runs))]

    def card(html: str, name: str) -> str:
        found = re.search(rf'<div class="kpi" id="kpi-{name}">.*?</div>\s*</div>', html, re.S)
        assert found is not None, name
        return found[0]

    def first_cells(html: str) -> list[list[str]]:
        # the forecast's table; the next one explains with depth 2's pieces
        section = html[html.index('id="prediction"') : html.index('class="explains"')]
        rows = re.findall(r"<tr><td class=\"label\">(.*?)</tr>", section, re.S)
        return [re.findall(r"<td>(.*?)</td>", row, re.S)[:3] for row in rows]  # forecast..miss

    for name in ("forecast", "miss"):
        assert card(pages[0], name) == card(pages[1], name)
    assert first_cells(pages[0]) == first_cells(pages[1]) and len(first_cells(pages[0])) == 2
    assert "predicted from the depth-1 run alone" in card(pages[0], "forecast")
    # whose noise an unknown speedup's is, one sentence each (costmodel.spread), on the page too
    said = source_lines(table_of(runs), runs["steps"])
    assert len(said) == 2 and all(str(escape(line)) in pages[0] for line in said)
    for r in table_of(runs).to_dict("records"):  # each row's noise: its median step's CV first
        cv = f"{r['step_cv_d1_pct']:.1f}% · {r['step_cv_d2_pct']:.1f}%"
        assert f"CV of the median step {cv}" in pages[0]


@pytest.mark.parametrize(
    "page", sorted((ROOT / "reports").glob("*/report.html")), ids=lambda p: p.parent.name
)
def test_every_committed_report_leads_with_the_forecast(page):
    """A report committed before the headline changed (reports/h200-sweep until 2026-12-01) still
    led with the whole-run model's 0.2 pts, costed from depth 2's own pieces: regenerate it."""
    html = page.read_text()
    forecast = re.search(r'<div class="kpi" id="kpi-forecast">.*?</div>\s*</div>', html, re.S)
    assert forecast is not None and "predicted from the depth-1 run alone" in forecast[0]
    assert "largest |observed − predicted|" not in html


def test_every_headline_number_carries_its_interval_and_mark():
    """The demo's headline showed a speedup whose rows were `?`, without the mark."""
    row = dict(label="cpu · 4 streams", observed_pct=4.8, observed_lo=-12.8, observed_hi=20.3,
               observed_known=False, pairs=3, wall_d1_predicted_pct=6.1, wall_d1_predicted_lo=5.0,
               wall_d1_predicted_hi=7.5, wall_d1_error_pts=-1.3, wall_d1_error_lo=-18.0,
               wall_d1_error_hi=14.0)  # fmt: skip
    line = headline(pd.DataFrame([row]))
    assert line["forecast"] == "+6.1% [+5.0, +7.5] ?" and line["observed"].endswith("?")
    assert line["miss"] == "-1.3 pts [-18.0, +14.0] ?"
    # On a noisy CPU, plainly: the speedup is inside the noise.
    assert line["noise"] == ["cpu · 4 streams"]
    (sentence,) = noise_lines(pd.DataFrame([row]))
    assert "inside the noise" in sentence and "+4.8% [-12.8, +20.3] ?" in sentence


def test_a_forecast_from_fewer_than_6_repeats_is_never_called_known():
    """A median's 95% interval needs 6 values (costmodel.observed): a bootstrap over 3 repeats
    can come out within ±1 point, and the forecast and its miss were shown unmarked."""
    assert median_known(13.6, 14.8, 6) and not median_known(13.6, 14.8, 5)
    assert not median_known(13.0, 15.5, 6)
    few = simulated_sweep(repeats=3)
    table = table_of(few)
    narrow = table[(table["wall_d1_predicted_hi"] - table["wall_d1_predicted_lo"]) / 2 <= 1]
    assert len(narrow) and not table["wall_d1_predicted_known"].any()
    assert not table["wall_d1_error_known"].any()  # the miss's mark is a column too
    for r in table.to_dict("records"):
        assert miss_text(r).endswith(" ?") and headline(table)["forecast"].endswith(" ?")
    d1 = few["runs"][few["runs"]["depth"] == 1]
    alone = forecast_runs(d1, few["steps"], few["requests"], n_boot=200)
    assert not alone["wall_d1_predicted_known"].any()
    page = render_report(as_results(few), "sim", n_boot=200)
    shown = " ".join(re.sub(r"<[^>]+>", " ", page).split())
    for r in narrow.itertuples():  # the table's cell: +14.3% [13.6, 14.8] ?
        lo, hi = r.wall_d1_predicted_lo, r.wall_d1_predicted_hi
        assert f"{r.wall_d1_predicted_pct:+.1f}% [{lo:.1f}, {hi:.1f}] ?" in shown
        lo, hi = r.wall_d1_error_lo, r.wall_d1_error_hi
        assert f"{r.wall_d1_error_pts:.1f} pts [{lo:.1f}, {hi:.1f}] ?" in shown


def test_the_headline_says_how_many_processes_made_its_pairs(runs):
    """A sweep spreads its pairs over worker processes (runs.repeats); the page said "all made in
    one process" of every sweep."""

    def hero(processes) -> str:
        made = runs["runs"].assign(process=processes)
        page = render_report(as_results({**runs, "runs": made}), "sim", n_boot=50)
        return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())

    assert "all made in one process" in hero(1)
    two = hero(runs["runs"]["repeat"] % 2 + 1)
    assert "made in 2 processes" in two and "all made in one process" not in two


def test_the_notebook_shows_the_headline_first():
    notebook = json.loads((ROOT / "notebooks" / "02_cost_model.ipynb").read_text())
    code = ["".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "code"]
    predicted = next(i for i, c in enumerate(code) if "predict_runs(" in c)
    shown = code[predicted].index("display(headline_frame(table))")  # runs at both depths
    assert shown < code[predicted].index("display(forecast_runs(")  # else depth 1's alone


def test_the_readme_leads_with_the_forecast():
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("### Does the post's model predict") :]
    header = next(line for line in section.splitlines() if line.startswith("| rows |"))
    assert header.split("|")[2].strip().startswith("forecast from depth 1 alone")


def test_an_arrival_workloads_forecast_says_what_depth_1_cannot_pin_down(tmp_path):
    """A sweep whose requests arrive over time (Poisson): its forecast is replayed on a clock timed
    by depth 1, which `predict` and the report now say beside the number (wall_d1_caveat), not
    only in the JSON."""
    from bubblelab.runs.sweep import SweepSpec, run_sweep
    from tests.cli_helpers import run_bubblelab

    spec = SweepSpec(model="tiny-llama", streams=[2], output_len_mean=6, requests_per_stream=3,
                     prompt_len=6, repeats=2, min_repeats=2, arrival_rate=300.0)  # fmt: skip
    run_sweep(spec, tmp_path / "arrivals", use_nsys=False, say=lambda _: None)
    done = run_bubblelab("predict", str(tmp_path / "arrivals"), "--n-boot", "50", columns=200)
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stdout.split())
    assert "300 req/s: the forecast from depth 1 is uncertain here: arrivals:" in said
    page = tmp_path / "report.html"
    done = run_bubblelab("report", str(tmp_path / "arrivals"), "--out", str(page), "--n-boot", "50")
    assert done.returncode == 0, done.stderr
    assert "the forecast from depth 1 is uncertain here: arrivals:" in page.read_text()


def test_the_step_cv_is_each_runs_median_steady_step_over_the_repeats(runs):
    """step_cv_*: brute force over each run's steady steps, after the headline (it reads depth
    2's steps) and apart from wall per token, which the repeats' own workloads move too."""
    table = table_of(runs)
    assert not {"step_cv_d1_pct", "step_cv_d2_pct"} & set(HEADLINE)
    for row in table.to_dict("records"):
        for depth, ids in ((1, row["runs_block"]), (2, row["runs_pipe"])):
            medians = [
                steady_state(runs["steps"][runs["steps"]["run_id"] == run_id])["period_ms"].median()
                for run_id in ids.split(",")
            ]
            expect = 100 * np.std(medians, ddof=1) / np.mean(medians)
            assert row[f"step_cv_d{depth}_pct"] == pytest.approx(expect)


def test_the_misss_mark_follows_the_statistic_of_its_pairs():
    """wall_d1_error_known is the rule of the table's statistic: a median over pairs needs 6 of
    them (median_known), issue #16's pooled totals 5 (the frozen held-out set's rule), the
    forecast's own mark likewise; miss_text reads it, and a row from before the column falls
    back to the median's rule."""
    from bubblelab.costmodel.observed import pairs_known

    assert pairs_known(13.6, 14.8, 5, "pooled") and not pairs_known(13.6, 14.8, 5)
    five = simulated_sweep(repeats=5)
    for statistic in ("median", "pooled"):
        table = table_of(five, statistic=statistic)
        # the same 5 pairs, narrow: known as pooled totals, not as a median
        assert table["wall_d1_predicted_known"].all() == (statistic == "pooled")
        for r in table.to_dict("records"):
            rule = pairs_known(r["wall_d1_error_lo"], r["wall_d1_error_hi"], 5, statistic)
            assert r["wall_d1_error_known"] == rule and miss_text(r).endswith(" ?") != rule
            lo, hi = r["wall_d1_predicted_lo"], r["wall_d1_predicted_hi"]
            assert r["wall_d1_predicted_known"] == pairs_known(lo, hi, 5, statistic)
    row = dict(wall_d1_error_pts=0.2, wall_d1_error_lo=-0.1, wall_d1_error_hi=0.5, pairs=6)
    assert miss_text(row) == "+0.2 pts [-0.1, +0.5]" and miss_text(row | {"pairs": 5}).endswith("?")
