"""How sure are the steps of a run? The evidence for each rule's steps, the choice between rules,
and the word for it: `high` only where an independent check holds.

For every rule's steps (profiling/steps.py), `measure` reads:
- regularity: the robust coefficient of variation of the host windows' lengths (`spread`);
- coverage: the share of the GPU's time launched inside the steps;
- reads: the share of steps holding a device-to-host copy (the sampled tokens coming back, which a
  decode loop does once a step: a step made of several graph replays or cut at every sync has
  steps without one);
- repeats: the share of steps launching the same work (within REPEAT of the modal number of
  launching calls), over the middle half of the steps (where a run is steadiest: host checks and
  a prefill come first, the batch shrinks at the end). Cut at every one of two syncs a step, the
  steps alternate.
The last step is left out of both: a capture may cut it short.

`choose` takes the rule whose steps are closed by a read (READ_SHARE of them), then the best score
(coverage - spread); of rules as well closed that agree with it (AGREE: the same number of steps,
the same median window) and score within SCORE_TIE, the first of PRIORITY, the simplest
explanation.

`step_summary` gives the word. From the steady steps: high when their periods' CV <= 0.15 and >=
80% of the GPU's time is inside steps, medium at CV <= 0.5 and >= 50%, else low; and then `high`
stays only when an independent cross-check holds:
- another rule finds the same steps (`agrees with graph`);
- the steps are closed by a read, for a rule that does not look for reads (graph, pause, nvtx);
- the steps repeat one pattern of launches, for the sync rule (which does not look at launches);
- the steps match the generated length when it is known (--output-len-mean: one step a token);
and nothing contradicts it:
- no other rule whose steps are as well supported (closed by reads, repeating) finds different
  steps;
- no GPU op or CUDA call was dropped by the value checks at ingest (trace_check.check_values).
Otherwise `sure` is false and `unsure` says why in one line, with the runner-up and how to settle
it (--step-rule). bubblelab's own ranges are the engine's own word for its steps: no cross-check.
"""

from __future__ import annotations

import math

import duckdb
import numpy as np
import pandas as pd

from . import queries
from .catalog import one_row
from .trace_check import value_warnings

READ_SHARE = 0.9  # steps closed by a read: at least this share of them holds one
REPEAT = 0.05  # steps launch the same work: within 5% of the modal number of launching calls
AGREE = (0.02, 0.05)  # two rules agree: step counts within 2% (or 2), median windows within 5%
MIDDLE = 3  # the repeats are read over the middle half of the steps, at least this many
SCORE_TIE = 0.05  # of agreeing rules, those scoring within this of the best are as good
PRIORITY = ("nvtx", "sync", "graph", "pause")
TOKENS = 0.05  # steps match the generated length L within 5% (or 2 steps)


def measure(
    con: duckdb.DuckDBPyConnection, run_id: str, candidates: list, launches: np.ndarray
) -> None:
    """Fill each candidate's coverage, spread, read_share and repeat_share (module docstring);
    launches: the start of every launching call, sorted."""
    reads = con.execute(
        "SELECT launched_at FROM gpu_ops WHERE run_id = ? AND op = 'memcpy' AND copy_kind = 2 "
        "AND launched_at IS NOT NULL ORDER BY 1",
        [run_id],
    ).fetchnumpy()["launched_at"]
    for c in candidates:
        w = c.windows
        if w.empty:
            c.coverage, c.spread, c.read_share, c.repeat_share = 0.0, math.inf, 0.0, 0.0
            continue
        span = {"first": int(w["host_start"].min()), "last": int(w["host_end"].max())}
        coverage = queries.run(con, "window_coverage", {"run_id": run_id, **span})
        c.coverage = float(coverage.iloc[0, 0])
        c.spread = spread(w)
        whole = w.iloc[:-1] if len(w) > 1 else w
        c.read_share = float((_held(reads, whole) > 0).mean())
        calls = _held(launches, whole)
        middle = calls[len(calls) // 4 : max(MIDDLE, len(calls) - len(calls) // 4)]
        modal = np.bincount(middle).argmax()
        c.repeat_share = float((np.abs(middle - modal) <= REPEAT * modal).mean())


def _held(times: np.ndarray, windows: pd.DataFrame) -> np.ndarray:
    """How many of the sorted times fall in each window."""
    return np.searchsorted(times, windows["host_end"].to_numpy(), side="left") - np.searchsorted(
        times, windows["host_start"].to_numpy(), side="left"
    )


def spread(windows: pd.DataFrame) -> float:
    """Robust coefficient of variation of the window lengths (prefill outliers do not count)."""
    lengths = (windows["host_end"] - windows["host_start"]).to_numpy(float)
    median = float(np.median(lengths)) if len(lengths) else 0.0
    return 1.4826 * float(np.median(np.abs(lengths - median))) / median if median > 0 else math.inf


def closed(c) -> bool:
    """Are a candidate's steps closed by a read of the tokens?"""
    return c.read_share >= READ_SHARE


def repeating(c) -> bool:
    """Do a candidate's steps launch the same work?"""
    return c.repeat_share >= READ_SHARE


def agree(a, b) -> bool:
    """Do two candidates (anything with steps and window_ms) find the same steps?"""
    steps, window = AGREE
    return abs(a.steps - b.steps) <= max(2, steps * max(a.steps, b.steps)) and abs(
        a.window_ms - b.window_ms
    ) <= window * max(a.window_ms, b.window_ms)


def support(c) -> tuple[bool, bool]:
    """How well the evidence supports a candidate's steps: closed by reads, then repeating."""
    return closed(c), repeating(c)


def choose(candidates: list):
    """The rule to use (module docstring): closed by reads, then the best score; of those as well
    closed that agree with it and score about as well, the first of PRIORITY."""
    best = max(candidates, key=lambda c: (closed(c), c.score))
    same = [
        c
        for c in candidates
        if c is best
        or (agree(c, best) and closed(c) == closed(best) and c.score >= best.score - SCORE_TIE)
    ]
    return min(same, key=lambda c: PRIORITY.index(c.rule))


def step_summary(
    con: duckdb.DuckDBPyConnection,
    run_id: str,
    steps: pd.DataFrame,
    steady: pd.DataFrame,
    output_len: float | None = None,
) -> dict:
    """How the run's steps were found and how sure that is (module docstring): the rule, steps
    found (decode, prefill-like), the coefficient of variation of the steady steps' periods (how
    regular they are; `steady` is core.steady.steady_state of `steps`), the share of the GPU's time
    inside found steps, the word for it (`confidence`), whether it is sure, the evidence and the
    other rules' steps, and what the value checks dropped (`checks`)."""
    found = con.execute(
        "SELECT rule, detail, pid, engine_tid, gap_threshold_ns FROM step_rules WHERE run_id = ?",
        [run_id],
    ).fetchone()
    default = ("bubblelab", "NVTX ranges of domain bubblelab", None, None, None)
    rule, detail, pid, tid, gap_ns = found or default
    covered, total = one_row(
        con,
        'SELECT sum("end" - start) FILTER (step IS NOT NULL), sum("end" - start) FROM gpu_ops '
        "WHERE run_id = ?",
        [run_id],
    )
    periods = steady["period_ms"].dropna()
    cv = float(periods.std(ddof=0) / periods.mean()) if len(periods) >= 2 else None
    coverage = float((covered or 0) / total) if total else None  # no op inside a step: 0
    high = cv is not None and coverage is not None and cv <= 0.15 and coverage >= 0.8
    medium = cv is not None and coverage is not None and cv <= 0.5 and coverage >= 0.5
    rules = con.execute(
        "SELECT rule, detail, steps, window_ms, spread, coverage, read_share, repeat_share, chosen "
        "FROM step_candidates WHERE run_id = ?",
        [run_id],
    ).df()
    rules = rules.assign(  # the chosen rule, then the runner-up first: as choose() ranks them
        closed=rules.read_share >= READ_SHARE, score=rules.coverage - rules.spread
    ).sort_values(["chosen", "closed", "score", "rule"], ascending=[False, False, False, True])
    checks = value_warnings(con, run_id)
    dropped = bool(
        con.execute(
            "SELECT 1 FROM trace_checks WHERE run_id = ? AND action = 'dropped' "
            "AND what IN ('GPU ops', 'CUDA API calls')",
            [run_id],
        ).fetchone()
    )
    said, doubts = _weigh(rule, rules, steps, output_len)
    if dropped:
        doubts.append(f"the trace had rows that could not be believed ({checks[0]})")
    sure = high and (rule == "bubblelab" or bool(said)) and not doubts
    if high and not sure and not doubts:
        doubts.append("no second rule, read or token count confirms its steps")
    return {
        "rule": rule,
        "detail": detail,
        "pid": None if pid is None else int(pid) >> 24 & 0xFFFFFF,
        "engine_tid": None if tid is None else int(tid) & 0xFFFFFF,
        "steps": int(len(steps)),
        "decode_steps": int((steps["kind"] == "decode").sum()),
        "prefill_steps": int((steps["kind"] == "prefill").sum()),
        "period_cv": None if cv is None else round(cv, 6),
        "gpu_coverage": None if coverage is None else round(coverage, 6),
        "confidence": "high" if sure else "medium" if medium else "low",
        "sure": sure,
        "evidence": "; ".join(said) or None,
        "unsure": None if sure else _unsure(rule, rules, doubts, high, medium),
        "rules": _records(rules),
        "checks": checks,
        "gap_threshold_us": None if gap_ns is None else gap_ns / 1e3,
    }


def _weigh(
    rule: str, rules: pd.DataFrame, steps: pd.DataFrame, output_len: float | None
) -> tuple[list[str], list[str]]:
    """(the cross-checks that hold, what contradicts the chosen rule's steps)."""
    said: list[str] = []
    doubts: list[str] = []
    if output_len is not None and len(steps):
        if abs(len(steps) - output_len) <= max(2, TOKENS * output_len):
            said.append(f"{len(steps)} steps for {output_len:g} generated tokens a request")
    chosen = rules[rules.chosen]
    if chosen.empty:  # bubblelab's ranges: no other rule was tried
        return said, doubts
    mine = chosen.iloc[0]
    if rule != "sync" and closed(mine):
        said.insert(0, f"{mine.read_share:.0%} of its steps end in a device-to-host read")
    if rule == "sync" and repeating(mine):
        said.insert(0, f"{mine.repeat_share:.0%} of its steps launch the same work")
    against: dict[str, list[str]] = {}  # what a better-or-as-well supported rule finds: its rules
    for other in rules[~rules.chosen].itertuples():
        if agree(other, mine):
            said.append(f"the {other.rule} rule finds the same steps")
        elif support(other) >= support(mine):
            against.setdefault(f"{other.steps} steps of {other.window_ms:.3g} ms", []).append(
                other.rule
            )
    for steps, names in against.items():
        who = (
            f"the {names[0]} rule finds"
            if len(names) == 1
            else f"the {' and '.join(names)} rules find"
        )
        doubts.append(f"{who} {steps} against {mine.steps} of {mine.window_ms:.3g} ms")
    return said, doubts


def _unsure(rule: str, rules: pd.DataFrame, doubts: list[str], high: bool, medium: bool) -> str:
    """One line: why the steps are not sure, the runner-up, and how to settle it."""
    why = doubts or [
        "its steps come irregularly or hold little of the GPU's time"
        if not high
        else "nothing confirms its steps"
    ]
    others = rules[~rules.chosen]
    settle = "|".join(dict.fromkeys([rule, *others.rule]))
    runner = (
        f"; runner-up {others.iloc[0].rule}: {others.iloc[0].steps} steps of "
        f"{others.iloc[0].window_ms:.3g} ms"
        if len(others)
        else ""
    )
    how = (
        ""
        if rule == "bubblelab" or others.empty
        else f"; --step-rule {settle} settles it"
        if rule != "nvtx"
        else f"; without --step-range, --step-rule {'|'.join(others.rule)} settles it"
    )
    return f"not sure of the {rule} rule's steps: {'; '.join(why)}{runner}{how}"


def _records(rules: pd.DataFrame) -> list[dict]:
    return [
        {
            "rule": r.rule,
            "steps": int(r.steps),
            "window_ms": round(float(r.window_ms), 6),
            "spread": None if not math.isfinite(r.spread) else round(float(r.spread), 6),
            "gpu_coverage": round(float(r.coverage), 6),
            "read_share": round(float(r.read_share), 6),
            "repeat_share": round(float(r.repeat_share), 6),
            "chosen": bool(r.chosen),
        }
        for r in rules.itertuples()
    ]
