"""Percentile bootstrap intervals: resample steps (or repeats) with replacement, recompute, take
quantiles."""

from __future__ import annotations

import numpy as np

from ..core.checks import check_int

Z95 = (2.5, 97.5)
# One draw holds n_boot x len(values) indices: 10,000 x 5,000 steps is 400 MB.
MAX_N_BOOT = 10_000


def check_n_boot(n_boot: int) -> int:
    return check_int("n_boot", n_boot, 1, MAX_N_BOOT)


def resample_medians(values, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """n_boot medians of `values` resampled with replacement (one vectorised draw)."""
    check_n_boot(n_boot)
    v = np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    if v.size == 0:
        return np.full(n_boot, np.nan)
    return np.median(v[rng.integers(0, v.size, size=(n_boot, v.size))], axis=1)


def resample_means(values, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    check_n_boot(n_boot)
    v = np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    if v.size == 0:
        return np.full(n_boot, np.nan)
    return v[rng.integers(0, v.size, size=(n_boot, v.size))].mean(axis=1)


def interval(samples: np.ndarray, percentiles: tuple[float, float] = Z95) -> tuple[float, float]:
    samples = np.asarray(samples, dtype=float)
    samples = samples[np.isfinite(samples)]
    if samples.size == 0:
        return (np.nan, np.nan)
    lo, hi = np.percentile(samples, percentiles)
    return float(lo), float(hi)
