"""How many repeats a configuration needs: pairs of depth-1 and depth-2 runs until the observed
speedup is known to ±1 point, or the configuration's time budget is spent.

A sweep (runs.repeats) runs a configuration pair by pair, depths in ABBA order (d1 d2, d2 d1, d1
d2, ...: a drift in clocks or host speed over the pairs then falls on both depths alike), and after
each pair asks `decide` whether to run another. It stops

- **known**: at least `min_pairs` and the median pair's 95% interval (costmodel.observed) is within
  ±1 point;
- **budget spent**: at least `min_pairs`, and the configuration's runs have taken `budget_s`;
- **max pairs**: `max_pairs` ran.

Nothing else: the rule never looks at the speedup itself, only at how well it is known.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ..core.checks import check_float, check_int
from ..core.errors import OptionError
from .observed import Observed, cv_pct, median_of_pairs, pair_ratios, wall_cv_pct

KNOWN, BUDGET, MAX_PAIRS = "known", "budget spent", "max pairs"


@dataclass(frozen=True)
class RepeatRule:
    budget_s: float = 30.0  # seconds of runs (warm-up and workload) a configuration may take
    min_pairs: int = 3  # fewer say nothing about the spread
    max_pairs: int = 20

    def __post_init__(self) -> None:
        check_float("budget_s", self.budget_s, 0, 1e6)
        check_int("min_pairs", self.min_pairs, 1, 1000)
        check_int("max_pairs", self.max_pairs, 1, 1000)
        if self.min_pairs > self.max_pairs:
            raise OptionError(
                "min_pairs", f"must be at most max_pairs ({self.max_pairs})", self.min_pairs
            )


@dataclass(frozen=True)
class Verdict:
    """Where a configuration's repeats stand after its latest pair."""

    more: bool  # run another pair
    stop: str | None  # why it stopped (KNOWN, BUDGET, MAX_PAIRS); None while more
    observed: Observed
    spent_s: float
    cv_d1_pct: float  # wall per token over the repeats, each depth (the workload's spread in it)
    cv_d2_pct: float
    step_cv_d1_pct: float = float("nan")  # each run's median decode step: the noise alone
    step_cv_d2_pct: float = float("nan")

    def record(self) -> dict:
        """As results.json keeps it (provenance "repeats", one per configuration)."""
        out = {k: v for k, v in asdict(self).items() if k != "observed"}
        return {**out, **self.observed.columns()}


def decide(
    tokens1, wall1, tokens2, wall2, spent_s: float, rule: RepeatRule, steps1=(), steps2=()
) -> Verdict:
    """The rule, after each pair: tokens and wall seconds of the configuration's pairs so far, at
    each depth, and the seconds its runs took; steps1 / steps2, each run's median decode step (ms),
    only for the record."""
    observed = median_of_pairs(pair_ratios(tokens1, wall1, tokens2, wall2))
    n = observed.pairs
    if n >= rule.min_pairs and observed.known:
        stop: str | None = KNOWN
    elif n >= rule.max_pairs:
        stop = MAX_PAIRS
    elif n >= rule.min_pairs and spent_s >= rule.budget_s:
        stop = BUDGET
    else:
        stop = None
    return Verdict(
        more=stop is None,
        stop=stop,
        observed=observed,
        spent_s=float(spent_s),
        cv_d1_pct=wall_cv_pct(tokens1, wall1),
        cv_d2_pct=wall_cv_pct(tokens2, wall2),
        step_cv_d1_pct=cv_pct(steps1),
        step_cv_d2_pct=cv_pct(steps2),
    )


def pair_order(pair: int) -> tuple[int, int]:
    """The depths of a configuration's pair number `pair` in the order they run: ABBA."""
    return (1, 2) if pair % 2 == 0 else (2, 1)


def describe(v: dict) -> str:
    """One line for the console: a Verdict.record()."""
    pct, lo, hi = v["observed_pct"], v["observed_lo"], v["observed_hi"]
    interval = f" [{lo:+.1f}, {hi:+.1f}]" if np.isfinite(lo) else ""
    mark = "" if v["observed_known"] else " ?"
    why = {KNOWN: "known to ±1 point", BUDGET: "not known: budget spent"}.get(
        v["stop"], "not known: every repeat ran"
    )
    step = (v.get("step_cv_d1_pct", np.nan), v.get("step_cv_d2_pct", np.nan))
    walls = f"{v['cv_d1_pct']:.1f}% (depth 1), {v['cv_d2_pct']:.1f}% (depth 2)"
    noise = (
        f"CV of the median step {step[0]:.1f}% (depth 1), {step[1]:.1f}% (depth 2); of wall per "
        f"token, the workload's spread in it, {walls}"
        if np.isfinite(step).all()
        else f"CV of wall per token {walls}"
    )
    done = f"after {v['pairs']} pairs in {v['spent_s']:.0f} s, {why}"
    return f"{pct:+.1f}%{interval}{mark} {done}; {noise}"
