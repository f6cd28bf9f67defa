"""How many repeats a configuration needs: pairs of depth-1 and depth-2 runs until the observed
speedup is known to ±1 point, or the configuration's time budget is spent.

A sweep (runs.repeats) runs a configuration pair by pair, depths in ABBA order (d1 d2, d2 d1, d1
d2, ...: a drift in clocks or host speed over the pairs then falls on both depths alike), and after
each pair asks `decide` whether to run another. It stops

- **known**: at least `min_pairs` and the median pair's 95% interval (costmodel.observed) is within
  ±1 point;
- **budget spent**: at least `min_pairs`, and the configuration's runs have taken `budget_s`;
- **max pairs**: `max_pairs` ran;
- **out of reach** (unless `out_of_reach` is off): at least 4 pairs (and `min_pairs`), and even at
  the least spread their pairs allow, the interval would need more pairs than the budget (or
  max_pairs) affords. A noisy host (docs/measurements.md section 7) would spend the rest of the
  budget and still not know it, so the time goes to the next configuration (issue #25 item 6).
- **processes disagree** (unless `out_of_reach` is off): the pairs are spread over `processes`
  worker processes, one after another (each draws its own host speed, docs/measurements.md section
  7; `quota` says how many pairs each earlier process makes), and once the last has made 2 pairs
  the processes' own medians lie more than 2 points apart. The interval covers every process's
  median (costmodel.observed), so it can no longer be within ±1 point.

Nothing else: the rule never looks at the speedup itself, only at how well it is known.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from ..core.checks import check_float, check_int
from ..core.errors import OptionError
from ..core.words import counted
from .observed import (
    KNOWN_PTS,
    Observed,
    cv_pct,
    median_of_pairs,
    pair_ratios,
    process_labels,
    process_medians,
    wall_cv_pct,
)

KNOWN, BUDGET, MAX_PAIRS, OUT_OF_REACH = "known", "budget spent", "max pairs", "out of reach"
DISAGREE = "processes disagree"
REACH_MIN_PAIRS = 4  # the spread of fewer says too little to give up on
# The median's standard error is 1.2533 sigma / sqrt(n) for normal noise; its 95% interval then
# spans 1.96 of them each way.
MEDIAN_SE, Z95, Z95_ONE_SIDED = 1.2533, 1.96, 1.645


@dataclass(frozen=True)
class RepeatRule:
    budget_s: float = 30.0  # seconds of runs (warm-up and workload) a configuration may take
    min_pairs: int = 3  # fewer say nothing about the spread
    max_pairs: int = 20
    out_of_reach: bool = True  # stop once ±1 point is out of reach (False: spend the budget)
    processes: int = 1  # worker processes the pairs are spread over, one after another

    def __post_init__(self) -> None:
        check_float("budget_s", self.budget_s, 0, 1e6)
        check_int("min_pairs", self.min_pairs, 1, 1000)
        check_int("max_pairs", self.max_pairs, 1, 1000)
        check_int("processes", self.processes, 1, 16)
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
    pairs_needed: float = float("nan")  # for ±1 point at the least spread the pairs allow
    pairs_affordable: float = float("nan")  # what the budget and max_pairs leave room for
    process_pcts: tuple[float, ...] = ()  # each process's median pair (%), by process number
    # The depth-1 runs' GPU idle share (%), least and most: the host's speed the speedup was
    # measured at. Depth 1's bubble is host time, and the speedup follows it from run to run.
    idle_d1_pct: tuple[float, ...] = ()

    def record(self) -> dict:
        """As results.json keeps it (provenance "repeats", one per configuration)."""
        out = {k: v for k, v in asdict(self).items() if k != "observed"}
        return {**out, **self.observed.columns()}


def decide(
    tokens1,
    wall1,
    tokens2,
    wall2,
    spent_s: float,
    rule: RepeatRule,
    steps1=(),
    steps2=(),
    processes=None,
    idle1=(),
) -> Verdict:
    """The rule, after each pair: tokens and wall seconds of the configuration's pairs so far, at
    each depth, and the seconds its runs took; processes, each pair's worker process; steps1 /
    steps2, each run's median decode step (ms), and idle1, each depth-1 run's GPU idle share (%),
    only for the record."""
    ratios = pair_ratios(tokens1, wall1, tokens2, wall2)
    labels = process_labels(processes, len(ratios))
    observed = median_of_pairs(ratios, labels)
    medians = process_medians(ratios, labels)
    n = observed.pairs
    needed, affordable = pairs_needed(ratios), pairs_affordable(n, spent_s, rule)
    if n >= rule.min_pairs and observed.known:
        stop: str | None = KNOWN
    elif n >= rule.max_pairs:
        stop = MAX_PAIRS
    elif rule.out_of_reach and n >= rule.min_pairs and disagree(medians, labels):
        stop = DISAGREE
    elif n >= rule.min_pairs and spent_s >= rule.budget_s:
        stop = BUDGET
    elif rule.out_of_reach and n >= max(rule.min_pairs, REACH_MIN_PAIRS) and needed > affordable:
        stop = OUT_OF_REACH
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
        pairs_needed=needed,
        pairs_affordable=affordable,
        process_pcts=tuple((m - 1.0) * 100.0 for _, m in sorted(medians.items())),
        idle_d1_pct=_least_most(idle1),
    )


def _least_most(values) -> tuple[float, ...]:
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    return (float(v.min()), float(v.max())) if v.size else ()


def disagree(medians: dict[int, float], labels: np.ndarray) -> bool:
    """Several processes (medians: each one's median pair ratio; labels: each pair's process),
    the last with at least 2 pairs, whose own medians lie more than the width of a known interval
    (2 points) apart: no later pair brings the interval within ±1."""
    if len(medians) < 2:
        return False
    last_pairs = int((labels == max(medians)).sum())
    spread_pts = (max(medians.values()) - min(medians.values())) * 100.0
    return last_pairs >= 2 and spread_pts > 2 * KNOWN_PTS


def quota(rule: RepeatRule, process: int) -> int:
    """The pairs a configuration has once process `process` (1-based) of rule.processes has made
    its share; the last process makes pairs until the rule stops. Earlier processes share
    min_pairs between them, at least one pair each."""
    if process >= rule.processes:
        return rule.max_pairs
    return max(process, math.ceil(rule.min_pairs * process / rule.processes))


def pairs_needed(ratios) -> float:
    """Pairs the median's 95% interval would need to be within ±1 point, were the pairs' spread
    the least their sample allows: the one-sided 95% lower confidence bound of their standard
    deviation (chi-square, Wilson-Hilferty), so that a few unlucky pairs do not give up on a
    configuration that would settle. NaN under 2 pairs."""
    points = (np.asarray(ratios, dtype=float) - 1.0) * 100.0
    k = points.size - 1
    if k < 1:
        return float("nan")
    chi2_95 = k * (1 - 2 / (9 * k) + Z95_ONE_SIDED * math.sqrt(2 / (9 * k))) ** 3  # its 95th pct
    sd_low = float(points.std(ddof=1)) * math.sqrt(k / chi2_95)
    return (Z95 * MEDIAN_SE * sd_low) ** 2  # half-width 1 point


def pairs_affordable(n: int, spent_s: float, rule: RepeatRule) -> float:
    """The pairs the configuration can make in all: its budget at the pace so far (the budget
    rule stops at the first pair past it), at most max_pairs."""
    if n == 0:
        return float(rule.max_pairs)
    pace = spent_s / n
    by_budget = math.ceil(rule.budget_s / pace) if pace > 0 else rule.max_pairs
    return float(min(rule.max_pairs, max(n, by_budget)))


def pair_order(pair: int) -> tuple[int, int]:
    """The depths of a configuration's pair number `pair` in the order they run: ABBA."""
    return (1, 2) if pair % 2 == 0 else (2, 1)


def stop_words(v: dict) -> str:
    """Why a configuration's repeats stopped, in a few words: the console's line (describe) and the
    report's table (report.summary) say it the same way."""
    if v["stop"] == KNOWN:  # over one process: its host speed (docs/measurements.md §7)
        count = len(v.get("process_pcts") or ())
        where = f"over {count} processes" if count > 1 else "in this process"
        idle = list(v.get("idle_d1_pct") or [])
        at = f", depth 1's GPU idle {idle[0]:.1f}-{idle[1]:.1f}%" if len(idle) == 2 else ""
        return f"known to ±1 point {where}{at}"
    if v["stop"] == DISAGREE:
        return DISAGREE + " (" + ", ".join(f"{p:+.1f}%" for p in v["process_pcts"]) + ")"
    if v["stop"] == OUT_OF_REACH and np.isfinite(v.get("pairs_needed", np.nan)):
        return f"±1 point out of reach (~{v['pairs_needed']:.0f} pairs)"
    if v["stop"] == MAX_PAIRS:
        return "every repeat ran"
    return str(v["stop"])


def describe(v: dict) -> str:
    """One line for the console: a Verdict.record()."""
    pct, lo, hi = v["observed_pct"], v["observed_lo"], v["observed_hi"]
    interval = f" [{lo:+.1f}, {hi:+.1f}]" if np.isfinite(lo) else ""
    mark = "" if v["observed_known"] else " ?"
    why = stop_words(v) if v["stop"] == KNOWN else f"not known: {stop_words(v)}"
    if v["stop"] == OUT_OF_REACH and np.isfinite(v.get("pairs_affordable", np.nan)):
        why += f" at this spread, the budget affords {v['pairs_affordable']:.0f}"
    step = (v.get("step_cv_d1_pct", np.nan), v.get("step_cv_d2_pct", np.nan))
    walls = f"{v['cv_d1_pct']:.1f}% (depth 1), {v['cv_d2_pct']:.1f}% (depth 2)"
    noise = (
        f"CV of the median step {step[0]:.1f}% (depth 1), {step[1]:.1f}% (depth 2); of wall per "
        f"token, the workload's spread in it, {walls}"
        if np.isfinite(step).all()
        else f"CV of wall per token {walls}"
    )
    done = f"after {counted(v['pairs'], 'pair')} in {v['spent_s']:.0f} s, {why}"
    return f"{pct:+.1f}%{interval}{mark} {done}; {noise}"
