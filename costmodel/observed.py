"""Observed speedups worth predicting: depth 1 and depth 2 paired by repeat, intervals over whole
runs.

run-and-profile runs each repeat's depth 1 and depth 2 back to back on the same requests (same
seed), so a repeat is a pair and the pairs are the unit of the statistics: what varies between runs
(host speed, clocks, the schedule's luck) is in the spread of pairs, which resampling the steps of
one run cannot see. Each pair gives one ratio, depth 2's tokens/s over depth 1's, and the observed
speedup is their median: one slow repeat (a recompile, a clock dip) moves it by one rank, not by its
size, where a pooled total would carry it whole.

Its 95% interval is the median's own, from order statistics (the binomial rule: the k-th smallest
and k-th largest pair bracket the median with probability 1 − 2·P(Bin(n, ½) < k)), which holds for
any distribution of pairs. A percentile bootstrap of the median of a few pairs claims more than it
covers (at 3 pairs its interval is their range, which misses the median one time in four;
tests/test_costmodel_repeats.py measures it). With fewer than 6 pairs no pair bracket reaches 95%:
the interval is then the pairs' range and the speedup is never called known.

Pairs made in several processes (a sweep spreads them over worker processes, runs.repeats) carry
each its process: the host's speed is drawn per process as well as per run on the GPU machines
(docs/measurements.md section 7), and pairs of one process share its draw, so their spread can be
narrower than what a rerun would give. The interval is then widened to cover every process's own
median: two processes that disagree by 3 points leave an interval at least 3 points wide, however
well each process agreed with itself.

A speedup is *known* when that interval is within ±KNOWN_PTS points (half its width). The held-out
set of issue #16 was analysed with the statistic before this one (`pooled_over_pairs`: total tokens
over total time, a percentile bootstrap over pairs, known at 5 pairs); predict_runs keeps it for
reproducing that frozen table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from math import comb

import numpy as np
import pandas as pd

from .bootstrap import Z95, interval

KNOWN_PTS = 1.0  # half-width of the 95% interval, in points, for an observed speedup to be known
MIN_PAIRS_POOLED = 5  # the pooled statistic's bar (issue #16): its bootstrap is too narrow below
LEVEL = 1 - 2 * Z95[0] / 100  # 0.95
MEDIAN_95_VALUES = 6  # the fewest values whose range brackets their median at LEVEL (1 − 2/2^6)


@dataclass(frozen=True)
class Observed:
    """An observed speedup in percent (+10.0 = depth 2 delivers 10% more tokens per second)."""

    pct: float
    lo: float  # its interval (NaN with fewer than 2 pairs)
    hi: float
    pairs: int
    known: bool

    def columns(self) -> dict:
        """The prediction table's observed columns."""
        return dict(
            pairs=self.pairs,
            observed_pct=self.pct,
            observed_lo=self.lo,
            observed_hi=self.hi,
            observed_known=self.known,
        )


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


def pair_ratios(tokens1, wall1, tokens2, wall2) -> np.ndarray:
    """Each pair's speedup ratio: depth 2's tokens/s over depth 1's (1.10 = +10%)."""
    t1, w1, t2, w2 = (np.asarray(v, dtype=float) for v in (tokens1, wall1, tokens2, wall2))
    return (t2 / w2) / (t1 / w1)


def median_interval(values) -> tuple[float, float, float]:
    """(lo, hi, coverage): the k-th smallest and k-th largest values for the largest k whose pair
    brackets the median with probability >= 95% (1 − 2·P(Bin(n, ½) < k)), or the range (k = 1)
    when even it falls short (fewer than 6 values), with the probability it has."""
    v = np.sort(np.asarray(values, dtype=float))
    n = len(v)
    if n < 2:
        return (np.nan, np.nan, 0.0)

    def coverage(k: int) -> float:
        return 1 - 2 * sum(comb(n, i) for i in range(k)) / 2**n

    k = 1
    while k < n // 2 and coverage(k + 1) >= LEVEL:
        k += 1
    return (float(v[k - 1]), float(v[n - k]), coverage(k))


def known(lo: float, hi: float, coverage: float = 1.0) -> bool:
    """The interval is a 95% one and within ±KNOWN_PTS points."""
    return bool(coverage >= LEVEL and np.isfinite(lo) and (hi - lo) / 2 <= KNOWN_PTS)


def median_known(lo: float, hi: float, n: int) -> bool:
    """A median over n values, its interval resampled, is known: within ±KNOWN_PTS points and n
    at least MEDIAN_95_VALUES (fewer have no 95% interval of a median: even their range falls
    short, and a bootstrap's narrower interval covers less still)."""
    return n >= MEDIAN_95_VALUES and known(lo, hi)


def pairs_known(lo: float, hi: float, n: int, statistic: str = "median") -> bool:
    """A figure over n pairs, its interval resampling them, is known by its statistic's rule:
    median_known for a median pair, MIN_PAIRS_POOLED pairs for issue #16's pooled totals."""
    if statistic == "pooled":
        return n >= MIN_PAIRS_POOLED and known(lo, hi)
    return median_known(lo, hi, n)


def median_of_pairs(ratios, processes=None) -> Observed:
    """The observed speedup: the median pair, with the median's order-statistic interval, widened
    to every process's own median pair when `processes` (one label a pair) names several."""
    r = np.asarray(ratios, dtype=float)
    if r.size == 0:
        return Observed(np.nan, np.nan, np.nan, 0, False)
    lo, hi, coverage = median_interval(r)
    medians = process_medians(r, processes)
    if len(medians) > 1:
        lo, hi = min(lo, *medians.values()), max(hi, *medians.values())
    pct = lambda x: (x - 1.0) * 100.0  # noqa: E731
    return Observed(
        float(pct(np.median(r))), pct(lo), pct(hi), int(r.size), known(pct(lo), pct(hi), coverage)
    )


def process_medians(ratios, processes=None) -> dict[int, float]:
    """Each process's median pair ratio, by its label (one label a pair; None: one process,
    unlabelled pairs count as process 1)."""
    r = np.asarray(ratios, dtype=float)
    labels = process_labels(processes, r.size)
    return {int(p): float(np.median(r[labels == p])) for p in np.unique(labels)}


def process_labels(processes, n: int) -> np.ndarray:
    """Each pair's process number (1-based; None or NaN: process 1; no labels: all process 1)."""
    if processes is None:
        return np.ones(n, dtype=int)
    labels = np.array([1 if pd.isna(p) else int(p) for p in processes], dtype=int)
    if labels.size != n:
        raise ValueError(f"{labels.size} process labels for {n} pairs")
    return labels


def cv_pct(values) -> float:
    """Coefficient of variation (%) over repeats, sample standard deviation (NaN under 2 values)."""
    v = np.asarray(values, dtype=float)
    return float(100 * v.std(ddof=1) / v.mean()) if v.size > 1 else np.nan


def wall_cv_pct(tokens, walls) -> float:
    """cv_pct of a run's wall time per generated token: the wall's own CV when every repeat runs
    the same requests; when they do not (a sweep's repeats: a seed each), the workload's spread is
    in it too. Each run's median steady step moves little with the workload, and its cv_pct is the
    noise alone (predict's step_cv_d1_pct / _d2_pct: ~0.1% at depth 2 where this was 7%,
    docs/costmodel-heldout.md)."""
    return cv_pct(np.asarray(walls, dtype=float) / np.asarray(tokens, dtype=float))


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


def pooled_over_pairs(tokens1, wall1, tokens2, wall2, n_boot: int, rng) -> Observed:
    """Issue #16's statistic: total tokens over total time at each depth, its percentile bootstrap
    over pairs, known at >= MIN_PAIRS_POOLED pairs (the frozen held-out table was made with it)."""
    t1, w1, t2, w2 = (np.asarray(v, dtype=float) for v in (tokens1, wall1, tokens2, wall2))
    n = len(t1)

    def pct(idx: np.ndarray) -> float:
        return float((pooled(t1[idx], w1[idx], t2[idx], w2[idx]) - 1.0) * 100.0)

    lo, hi = pairs_interval(pct, n, n_boot, rng)
    return Observed(pct(np.arange(n)), lo, hi, n, pairs_known(lo, hi, n, "pooled"))
