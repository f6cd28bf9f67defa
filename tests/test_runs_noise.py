"""The demo's plain sentence: is depth 2's speedup more than its repeat pairs' disagreement?"""

from __future__ import annotations

import pandas as pd
import pytest

from bubblelab.runs.noise import noise_lines, speedup_noise


def runs(streams: int, speedups: list[float], profiled: bool = False) -> list[dict]:
    """A depth-1 run of 1 s and a depth-2 run at the given speedup per repeat (100 tokens each)."""
    out = []
    for repeat, s in enumerate(speedups):
        for depth, wall in ((1, 1.0), (2, 1.0 / (1 + s / 100))):
            out.append(dict(model="m", streams=streams, depth=depth, repeat=repeat, wall_s=wall,
                            generated_tokens=100, profiled=profiled))  # fmt: skip
    return out


def test_a_speedup_the_pairs_disagree_on_is_inside_the_noise():
    table = pd.DataFrame(runs(1, [5.0, -10.0, 2.0]) + runs(4, [5.0, 6.0, 4.0]) + runs(8, [3.0])
                         + runs(4, [-50.0], profiled=True))  # fmt: skip
    found = {c["streams"]: c for c in speedup_noise(table)}
    assert found[1]["inside_noise"] and not found[4]["inside_noise"] and found[8]["inside_noise"]
    assert found[4]["pairs"] == 3  # the profiled run is left out
    assert found[4]["pair_speedups_pct"] == pytest.approx([5.0, 6.0, 4.0])
    assert found[1]["wall_cv_pct"][1] == 0.0 and found[1]["wall_cv_pct"][2] > 5
    lines = noise_lines(table)
    assert lines[0].startswith("1 stream: depth 2 ") and "pairs +5.0, -10.0, +2.0" in lines[0]
    assert lines[0].endswith("inside the noise: the pairs disagree on its sign")
    # three pairs of one sign happen by chance one time in four: not enough to say "outside"
    assert lines[1].startswith("4 streams") and "outside the noise" not in lines[1]
    assert lines[1].endswith("every pair agrees on its sign, but 3 pairs are too few to tell "
                             "it from the noise (6 that agree would, at 95%)")  # fmt: skip
    assert lines[2].endswith("one pair: its noise is unknown (more repeats tell)")


@pytest.mark.parametrize(("n", "outside"), [(5, False), (6, True)])
def test_outside_the_noise_takes_a_95_percent_interval_clear_of_zero(n, outside):
    table = pd.DataFrame(runs(4, [5.0 + i for i in range(n)]))
    (found,) = speedup_noise(table)
    assert not found["inside_noise"] and found["too_few_pairs"] is not outside
    assert (
        noise_lines(table)[0].endswith("outside the noise: every pair agrees on its sign")
        is outside
    )


def test_the_noise_line_shows_the_prediction_tables_figure():
    """The demo's noise line and its prediction table name one speedup: the median pair (they once
    printed -5.4% and -6.2% for the same runs, pooled against median)."""
    from bubblelab.costmodel.observed import median_of_pairs

    table = pd.DataFrame(runs(4, [-15.6, -6.2, 5.5]))
    (found,) = speedup_noise(table)
    ratios = [1 + s / 100 for s in (-15.6, -6.2, 5.5)]
    assert found["speedup_pct"] == pytest.approx(median_of_pairs(ratios).pct)
    assert found["speedup_pct"] == pytest.approx(-6.2) and found["inside_noise"]
    assert "depth 2 -6.2% over depth 1" in noise_lines(table)[0]


def test_the_noise_line_and_the_prediction_table_give_one_cv():
    """Repeats of other requests: the raw walls' spread is mostly the workload's (the demo once
    printed "walls vary 17.3%" beside the table's 4.4% for the same runs); the line gives the
    table's figure, the CV of wall per token."""
    from bubblelab.costmodel.observed import wall_cv_pct

    rows = runs(1, [5.0, 6.0, 4.0])
    for r in rows:  # each repeat generates a different number of tokens, at a steady rate
        scale = 1 + r["repeat"]
        r["generated_tokens"] *= scale
        r["wall_s"] *= scale * (1.02 if r["repeat"] == 1 else 1.0)
    table = pd.DataFrame(rows)
    (found,) = speedup_noise(table)
    d1 = table[table.depth == 1]
    want = wall_cv_pct(d1.generated_tokens, d1.wall_s)
    assert found["wall_cv_pct"][1] == pytest.approx(want) and want < 2
    assert f"wall per token varies {want:.1f}%" in noise_lines(table)[0]
