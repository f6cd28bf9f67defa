"""Observed speedups worth predicting: depth 1 and depth 2 paired by repeat, intervals over whole
runs.

run-and-profile runs each repeat's depth 1 and depth 2 back to back on the same requests (same
seed), so a repeat is a pair and the pairs are the unit of resampling: what varies between runs
(host speed, clocks, the schedule's luck) is in the spread of pairs, which resampling the steps of
one run cannot see. The point estimate pools the pairs as a user would read a sweep, total tokens
over total time at each depth:

    speedup = (Σ tokens_2 / Σ wall_2) / (Σ tokens_1 / Σ wall_1)

and its 95% interval is the percentile bootstrap over pairs. A speedup is "known" when at least
MIN_PAIRS pairs put its interval within ±KNOWN_PTS points; otherwise the tables say it is not.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from .bootstrap import interval

KNOWN_PTS = (
    1.0  # half-width of the 95% interval, in points, for an observed speedup to count as known
)
MIN_PAIRS = 5  # fewer pairs make a percentile bootstrap too narrow to trust


def pair_repeats(d1: pd.DataFrame, d2: pd.DataFrame) -> list[tuple[pd.Series, pd.Series]]:
    """(depth-1 run, depth-2 run) per repeat both depths ran; without repeat numbers, in order."""
    if (
        "repeat" in d1
        and "repeat" in d2
        and d1["repeat"].notna().all()
        and d2["repeat"].notna().all()
    ):
        two = {int(r["repeat"]): r for _, r in d2.iterrows()}
        return [(r, two[int(r["repeat"])]) for _, r in d1.iterrows() if int(r["repeat"]) in two]
    order = [c for c in ("started_at", "run_id") if c in d1]
    d1, d2 = d1.sort_values(order), d2.sort_values(order)
    return [(a, b) for (_, a), (_, b) in zip(d1.iterrows(), d2.iterrows(), strict=False)]


def pooled(tokens1, wall1, tokens2, wall2) -> float:
    """Depth 2's throughput over depth 1's, each pooled over the pairs (ratio; 1.10 = +10%)."""
    return (np.sum(tokens2) / np.sum(wall2)) / (np.sum(tokens1) / np.sum(wall1))


def pairs_interval(
    stat: Callable[[np.ndarray], float], n_pairs: int, n_boot: int, rng: np.random.Generator
) -> tuple[float, float]:
    """95% percentile interval of stat(indices) over pairs resampled with replacement (NaN with
    fewer than 2 pairs)."""
    if n_pairs < 2:
        return (np.nan, np.nan)
    draws = rng.integers(0, n_pairs, size=(n_boot, n_pairs))
    return interval(np.array([stat(idx) for idx in draws]))


def known(lo: float, hi: float, n_pairs: int) -> bool:
    return bool(n_pairs >= MIN_PAIRS and np.isfinite(lo) and (hi - lo) / 2 <= KNOWN_PTS)
