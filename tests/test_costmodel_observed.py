"""Observed speedups: depth 1 and depth 2 paired by repeat, intervals from resampling pairs."""

import numpy as np
import pandas as pd
import pytest

from bubblelab.costmodel.observed import (
    known,
    median_of_pairs,
    pair_repeats,
    pairs_interval,
    pooled,
    pooled_over_pairs,
    wall_cv_pct,
)


def runs(depth: int, repeats: list[int | None]) -> pd.DataFrame:
    return pd.DataFrame(
        {"run_id": [f"d{depth}-r{r}" for r in repeats], "depth": depth, "repeat": repeats,
         "started_at": [f"2026-11-23 10:0{i}" for i in range(len(repeats))]}
    )  # fmt: skip


def test_pairs_are_repeats_both_depths_ran():
    pairs = pair_repeats(runs(1, [0, 1, 2]), runs(2, [2, 0]))
    assert [(a.run_id, b.run_id) for a, b in pairs] == [("d1-r0", "d2-r0"), ("d1-r2", "d2-r2")]
    # Without repeat numbers (catalogs, old traces): in the order they ran.
    unnumbered = pair_repeats(runs(1, [None, None]), runs(2, [None, None]))
    assert [(a.run_id, b.run_id) for a, b in unnumbered] == [
        ("d1-rNone", "d2-rNone"), ("d1-rNone", "d2-rNone")
    ]  # fmt: skip


def test_pooled_speedup_weighs_runs_by_their_tokens_and_time():
    # Two pairs: +10% on a short run, +30% on a run three times as long.
    assert pooled([100, 300], [1.0, 3.0], [100, 300], [1 / 1.1, 3 / 1.3]) == pytest.approx(
        400 / (1 / 1.1 + 3 / 1.3) / 100
    )


def test_intervals_come_from_pairs_and_need_five_to_be_known():
    """Issue #16's pooled statistic: a bootstrap over pairs, known only from 5 pairs."""
    rng = np.random.default_rng(0)
    values = np.array([10.0, 10.4, 9.8, 10.1, 10.2, 9.9])
    lo, hi = pairs_interval(lambda i: values[i].mean(), len(values), 2000, rng)
    assert values.min() < lo < values.mean() < hi < values.max()
    assert known(lo, hi) and not known(8.0, 12.0)  # ±2 points
    assert np.isnan(pairs_interval(lambda i: 1.0, 1, 100, rng)).all()  # one pair: no interval
    tokens, walls1 = np.full(6, 100.0), np.ones(6)
    walls2 = 1 / (1 + values / 100)  # pair speedups of +9.8 to +10.4%
    six = pooled_over_pairs(tokens, walls1, tokens, walls2, 500, rng)
    four = pooled_over_pairs(tokens[:4], walls1[:4], tokens[:4], walls2[:4], 500, rng)
    assert six.known and six.pairs == 6 and six.lo < six.pct < six.hi
    assert not four.known  # too few pairs: not claimed, however narrow


def test_the_median_pair_and_its_interval():
    ratios = 1 + np.array([10.0, 10.4, 9.8, 10.1, 10.2, 9.9]) / 100
    observed = median_of_pairs(ratios)
    assert observed.pct == pytest.approx(10.05) and observed.known
    assert (observed.lo, observed.hi) == pytest.approx((9.8, 10.4))  # 6 pairs: their range, 96.9%
    assert observed.columns()["pairs"] == 6
    assert not median_of_pairs(ratios[:5]).known  # no 95% interval from 5 pairs
    one = median_of_pairs(ratios[:1])
    assert one.pct == pytest.approx(10.0) and np.isnan(one.lo) and not one.known
    assert wall_cv_pct([100, 200], [1.0, 2.2]) == pytest.approx(
        100 * np.std([0.01, 0.011], ddof=1) / 0.0105
    )
    assert np.isnan(wall_cv_pct([100], [1.0]))
