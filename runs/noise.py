"""Is a sweep's depth-2 speedup larger than its own noise? Said plainly, per configuration.

Each repeat pairs a depth-1 and a depth-2 run on the same requests
(costmodel.observed.pair_repeats), so each pair gives a speedup of its own. The speedup is the
median pair with its interval (costmodel.observed.median_of_pairs), the same figure the prediction
table shows; it is inside its noise when fewer than two pairs ran (the noise is unknown) or when the
interval holds 0 (costmodel.headline.inside_noise: with up to five pairs the interval is their
range, so the pairs disagree on its sign). Outside it only when that interval is a 95% one: pairs
that all agree on the sign prove nothing at 95% until there are six of them (three agree by chance
one time in four), and the sentence says so. Beside it, each depth's coefficient of variation of
wall per token over the repeats: the prediction table's `CV of wall`
(costmodel.observed.wall_cv_pct), the workload's spread in it where repeats run their own
requests, never the raw walls' (several times larger there). The demo prints these lines: a
laptop's CPU, shared with whatever else runs, often moves a run by more than pipelining does.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..core.words import counted
from ..costmodel.headline import inside_noise
from ..costmodel.observed import (
    LEVEL,
    median_interval,
    median_of_pairs,
    pair_ratios,
    pair_repeats,
    wall_cv_pct,
)


def speedup_noise(runs: pd.DataFrame) -> list[dict]:
    """Per (model, streams): the speedup (%, the median pair), each pair's (%), whether it is inside
    the noise, and the CV of wall per token per depth (%; NaN with one repeat). Unprofiled runs
    when any."""
    if "profiled" in runs and runs["profiled"].eq(False).any():
        runs = runs[runs["profiled"].eq(False)]
    out = []
    for (model, streams), group in runs.groupby(["model", "streams"], sort=True):
        d1, d2 = group[group["depth"] == 1], group[group["depth"] == 2]
        pairs = pair_repeats(d1, d2)
        if not pairs:
            continue
        t1, w1 = [a.generated_tokens for a, _ in pairs], [a.wall_s for a, _ in pairs]
        t2, w2 = [b.generated_tokens for _, b in pairs], [b.wall_s for _, b in pairs]
        ratios = pair_ratios(t1, w1, t2, w2)
        each = [100 * (r - 1) for r in ratios]
        observed = median_of_pairs(ratios)
        inside = len(each) < 2 or inside_noise(observed.columns())
        out.append({
            "model": model, "streams": int(streams), "pairs": len(pairs),
            "speedup_pct": observed.pct, "pair_speedups_pct": each,
            "inside_noise": inside,
            # outside at 95% only: the interval of a few pairs is their range, which covers less
            "too_few_pairs": not inside and median_interval(ratios)[2] < LEVEL,
            "wall_cv_pct": {1: wall_cv_pct(t1, w1), 2: wall_cv_pct(t2, w2)},
        })  # fmt: skip
    return out


def noise_lines(runs: pd.DataFrame) -> list[str]:
    """One plain sentence per configuration, e.g. "4 streams: depth 2 -4.7% over depth 1, pairs
    +2.1, -11.4, -4.7 (wall per token varies 8.0% / 6.1% between repeats): inside the noise"."""
    lines = []
    for c in speedup_noise(runs):
        pairs = ", ".join(f"{s:+.1f}" for s in c["pair_speedups_pct"])
        cv = c["wall_cv_pct"]
        vary = (f" (wall per token varies {cv[1]:.1f}% / {cv[2]:.1f}% between repeats)"
                if np.isfinite(cv[1]) and np.isfinite(cv[2]) else "")  # fmt: skip
        if c["pairs"] < 2:
            verdict = "one pair: its noise is unknown (more repeats tell)"
        elif c["inside_noise"]:
            verdict = "inside the noise: the pairs disagree on its sign"
        elif c["too_few_pairs"]:
            verdict = (f"every pair agrees on its sign, but {c['pairs']} pairs are too few to "
                       "tell it from the noise (6 that agree would, at 95%)")  # fmt: skip
        else:
            verdict = "outside the noise: every pair agrees on its sign"
        label = counted(c["streams"], "stream")
        lines.append(f"{label}: depth 2 {c['speedup_pct']:+.1f}% over depth 1, "
                     f"pairs {pairs}{vary}: {verdict}")  # fmt: skip
    return lines
