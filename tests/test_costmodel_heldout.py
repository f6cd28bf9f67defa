"""The held-out set (docs/costmodel-heldout.md): the model reported on it is the frozen one."""

import json
from pathlib import Path

import pandas as pd
import pytest

from bubblelab.costmodel.predict import predict_runs
from bubblelab.runs.rundir import read_results

ROOT = Path(__file__).parents[1]
HELD_OUT = ROOT / "docs" / "measurements" / "2026-11-23" / "costmodel-heldout"
FROZEN = HELD_OUT / "predictions-3f021e1.json"  # tools/docs/costmodel_at_commit.py at 3f021e1


@pytest.mark.skipif(not FROZEN.is_file(), reason="the held-out results are not in this checkout")
def test_todays_model_predicts_the_held_out_set_as_the_frozen_commit_did():
    """docs/h200-costmodel.md's held-out table is made by today's code: it may be reported as held
    out only while today's predictions are the frozen commit's. A change to the model that moves
    any held-out number fails here; it then needs a new held-out set, not a new table. The observed
    side is read with the statistic of the freeze (issue #16's pooled pairs; issue #25 made the
    median pair the default)."""
    tables = []
    for path in sorted(HELD_OUT.glob("held-out-*.results.json.gz")):
        name = path.name.removeprefix("held-out-").removesuffix(".results.json.gz")
        results = read_results(path)
        table = predict_runs(results.runs, results.steps, results.requests, statistic="pooled")
        tables.append(table.assign(name=name))
    ours = json.loads(pd.concat(tables, ignore_index=True).to_json(orient="records"))
    frozen = json.loads(FROZEN.read_text())
    assert len(ours) == len(frozen) == 8
    for mine, theirs in zip(ours, frozen, strict=True):  # columns added since (TP) aside
        assert {k: mine[k] for k in theirs} == theirs, mine["label"]


@pytest.mark.skipif(not FROZEN.is_file(), reason="the held-out results are not in this checkout")
def test_the_readmes_held_out_row_is_the_frozen_predictions():
    """The README's cost-model section, its held-out row: the forecast from depth 1 alone, its
    largest miss (rows within 1 point), then the rows whose observed speedup is known to ±1 point,
    by rule, then the same miss of the two models that explain (they read depth 2)."""
    table = pd.DataFrame(json.loads(FROZEN.read_text()))

    def miss(column: str) -> str:
        miss = table[column].abs()
        return f"{miss.max():.1f} ({(miss <= 1.0).sum()} of {len(table)})"

    known = f"{int(table['observed_known'].sum())} of {len(table)}"
    cells = [miss("wall_d1_error_pts"), known, miss("error_pts"), miss("wall_error_pts")]
    section = (ROOT / "README.md").read_text()
    assert " | ".join(cells) + " |" in section, cells


def test_the_explanation_names_what_the_pieces_cannot():
    """A miss the measured depth-2 pieces do not close is said to be the model's structure (the
    model fed every depth-2 piece still misses), not left to look explained."""
    from bubblelab.costmodel.headline import explanation

    row = {"term_admission_pts": -2.5, "term_replay_pts": 0.0, "term_forward_pts": -0.37,
           "term_host_pts": 0.03, "term_handoff_pts": -0.07, "term_overhead_pts": 0.23}  # fmt: skip
    assert explanation(row | {"wall_error_pts": -4.6}) == (
        "forward -0.4, overhead +0.2, handoff -0.1 pts; fed all of them the model still misses by "
        "-4.6 pts (its structure)"
    )
    assert (
        explanation(row | {"wall_error_pts": 0.2})
        == "forward -0.4, overhead +0.2, handoff -0.1 pts"
    )
