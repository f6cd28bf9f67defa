"""What every output shows first about a prediction table: the report's cards, `bubblelab predict`'s
first table and JSON keys, the README's table and the notebooks.

The headline is the forecast a user can act on before running depth 2, the whole-run model fed the
depth-1 run alone (wall_d1_predicted_pct), beside the observed speedup, each with its interval and a
`?` when it is not known to ±1 point (the interval is wider, or too few repeats for a 95% one:
observed_known, wall_d1_predicted_known), and the miss between them. Nothing in it reads a
depth-2 run's pieces (tests/test_costmodel_headline.py perturbs them and checks that nothing here
moves). The model fed depth 2's own pieces, and the post's per-step model on depth 2's period, read
the run they describe: they explain a measured speedup (which piece made the difference: the
term_<name>_pts), and are shown as that, never as accuracy.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..core.words import counted
from .observed import KNOWN_PTS, median_known
from .predict import HEADLINE
from .wholerun import TERMS

UNKNOWN = "?"  # beside a number whose 95% interval is wider than ±1 point, or not a 95% one


def within(lo: float | None, hi: float | None) -> bool:
    """An interval is there and within ±KNOWN_PTS points (half its width)."""
    return lo is not None and hi is not None and math.isfinite(lo) and (hi - lo) / 2 <= KNOWN_PTS


def pct_text(value: float, lo: float | None = None, hi: float | None = None, known=None) -> str:
    """ "+12.3% [11.5, 13.1]", and " ?" when not known to ±1 point (known: the caller's verdict,
    e.g. observed_known, else the interval's width decides)."""
    if value is None or not math.isfinite(value):
        return "–"
    text = f"{value:+.1f}%"
    if lo is not None and math.isfinite(lo):
        text += f" [{lo:+.1f}, {hi:+.1f}]"
    if not (within(lo, hi) if known is None else known):
        text += f" {UNKNOWN}"
    return text


def pts_text(value: float, lo: float | None = None, hi: float | None = None, known=None) -> str:
    """ "+1.2 pts [0.4, 2.0]", `?` marked as pct_text marks it."""
    if value is None or not math.isfinite(value):
        return "–"
    text = f"{value:+.1f} pts"
    if lo is not None and math.isfinite(lo):
        text += f" [{lo:+.1f}, {hi:+.1f}]"
    return text if (within(lo, hi) if known is None else known) else f"{text} {UNKNOWN}"


def miss_text(row: dict) -> str:
    """A prediction row's miss (observed − forecast from depth 1), `?` unless wall_d1_error_known
    (a row from before that column: known as a median over its pairs is)."""
    lo, hi = row["wall_d1_error_lo"], row["wall_d1_error_hi"]
    known = row.get("wall_d1_error_known")
    if known is None or known != known:  # absent, or NaN in a table joined with older rows
        known = median_known(lo, hi, int(row["pairs"]))
    return pts_text(row["wall_d1_error_pts"], lo, hi, bool(known))


def inside_noise(row: dict) -> bool:
    """The observed interval holds 0: on these repeats depth 2 cannot be told from depth 1."""
    lo, hi = row.get("observed_lo"), row.get("observed_hi")
    return lo is not None and hi is not None and math.isfinite(lo) and lo <= 0 <= hi


def headline(table: pd.DataFrame) -> dict | None:
    """The headline of a prediction table: its median configuration (by observed speedup; the
    lower one of an even count) with the range over every configuration, never a chosen one; the
    forecast's largest miss over every configuration (`miss_flagged`: its row's caveat said, from
    depth 1 alone, that the forecast was uncertain there); how many observed speedups are known; the
    configurations whose speedup is inside the noise."""
    if table.empty:
        return None
    rows = table.sort_values("observed_pct", kind="stable").to_dict("records")
    median = rows[(len(rows) - 1) // 2]
    miss = max(rows, key=lambda r: abs(r["wall_d1_error_pts"]))
    caveat = miss.get("wall_d1_caveat")  # said before depth 2 ran (a power limit, arrivals)
    return {
        "configs": len(rows),
        "label": median["label"],
        "forecast": pct_text(
            median["wall_d1_predicted_pct"],
            median["wall_d1_predicted_lo"],
            median["wall_d1_predicted_hi"],
            median.get("wall_d1_predicted_known"),
        ),
        "observed": pct_text(
            median["observed_pct"],
            median["observed_lo"],
            median["observed_hi"],
            median["observed_known"],
        ),
        "pairs": int(median["pairs"]),
        "observed_min": float(table["observed_pct"].min()),
        "observed_max": float(table["observed_pct"].max()),
        "forecast_min": float(table["wall_d1_predicted_pct"].min()),
        "forecast_max": float(table["wall_d1_predicted_pct"].max()),
        "miss": miss_text(miss),
        "miss_label": miss["label"],
        "miss_flagged": isinstance(caveat, str) and bool(caveat),
        "within_1": int((table["wall_d1_error_pts"].abs() <= KNOWN_PTS).sum()),
        "known": int(table["observed_known"].sum()),
        "noise": [r["label"] for r in rows if inside_noise(r)],
    }


def noise_lines(table: pd.DataFrame) -> list[str]:
    """Plain sentences for the configurations whose observed speedup is inside the noise."""
    lines = []
    for r in table.to_dict("records"):
        if inside_noise(r):
            observed = pct_text(r["observed_pct"], r["observed_lo"], r["observed_hi"], False)
            lines.append(
                f"{r['label']}: the measured speedup, {observed} over "
                f"{counted(r['pairs'], 'pair')}, is "
                "inside the noise of these repeats: depth 2 cannot be told from depth 1 here "
                "(more repeats, or a quieter machine, would)"
            )
    return lines


def caveat_lines(table: pd.DataFrame) -> list[str]:
    """Plain sentences for the forecasts from depth 1 that depth 1 alone cannot pin down (arrivals
    timed on a replayed clock, depth 1 idle waiting for them: predict's wall_d1_caveat)."""
    return [
        f"{r['label']}: the forecast from depth 1 is uncertain here: {r['wall_d1_caveat']}"
        for r in table.to_dict("records")
        if isinstance(r.get("wall_d1_caveat"), str) and r["wall_d1_caveat"]
    ]


HANDOFF_AGREE_MS = 0.004  # a probe this close to what depth 2's steps measured: said once, quietly


def handoff_lines(table: pd.DataFrame) -> list[str]:
    """The hand-over each forecast from depth 1 costed in (the depth-1 runs' probe: predict's
    handoff_probe_ms) against what depth 2's queued steps measured (handoff_d2_ms; 0 where depth 2
    queued none: nothing to compare): one line for all that agree within HANDOFF_AGREE_MS, one
    for each that does not."""
    rows = [r for r in table.to_dict("records") if np.isfinite(r.get("handoff_probe_ms", np.nan))]
    if not rows:
        return []
    compared = [r for r in rows if r["handoff_d2_ms"] > 0]
    apart = [
        r for r in compared if abs(r["handoff_probe_ms"] - r["handoff_d2_ms"]) > HANDOFF_AGREE_MS
    ]
    lo, hi = (f([r["handoff_probe_ms"] for r in rows]) for f in (min, max))
    lines = [
        f"hand-over between queued steps, probed by depth 1 and costed into its forecast: "
        f"{lo:.4f}{'' if lo == hi else f'-{hi:.4f}'} ms; within {HANDOFF_AGREE_MS * 1e3:.0f} us of "
        f"depth 2's in {len(compared) - len(apart)} of the {len(compared)} configurations whose "
        "depth 2 queued steps"
    ]
    lines += [
        f"{r['label']}: depth 1 probed a hand-over of {r['handoff_probe_ms']:.4f} ms, but depth "
        f"2's queued steps idled {r['handoff_d2_ms']:.4f} ms between them (term handoff "
        f"{r.get('term_handoff_pts', np.nan):+.1f} pts)"
        for r in apart
    ]
    return lines


STRUCTURE_PTS = 0.5  # a residual the model's own structure leaves, worth naming beside the pieces


def explanation(row: dict) -> str:
    """Which measured depth-2 piece makes the difference between the forecast and the model fed
    depth 2's pieces, largest first: what explains the miss, not a forecast."""
    terms = sorted(
        ((t, row.get(f"term_{t}_pts")) for t in TERMS if t != "admission"),
        key=lambda tv: -abs(tv[1]) if tv[1] is not None and np.isfinite(tv[1]) else 0,
    )
    shown = [f"{t} {v:+.1f}" for t, v in terms if v is not None and abs(v) >= 0.05]
    said = ", ".join(shown) + " pts" if shown else "no depth-2 piece moves it by 0.1 point"
    # What the pieces cannot explain: the model fed all of depth 2's measured pieces still misses.
    rest = row.get("wall_error_pts")
    if rest is not None and np.isfinite(rest) and abs(rest) >= STRUCTURE_PTS:
        said += f"; fed all of them the model still misses by {rest:+.1f} pts (its structure)"
    return said


def accuracy_cells(table: pd.DataFrame) -> list[str]:
    """A set of configurations in one line (the README's table): the forecast's largest miss in
    points (how many within 1 point) and how many observed speedups are known to ±1 point; then
    what explains the measurements, not forecasts: the largest misses of the post's per-step model
    and of the whole-run model fed depth 2's own pieces."""

    def largest(column: str) -> str:
        miss = table[column].abs()
        return f"{miss.max():.1f} ({int((miss <= KNOWN_PTS).sum())} of {len(table)})"

    known = f"{int(table['observed_known'].sum())} of {len(table)}"
    return [largest("wall_d1_error_pts"), known, largest("error_pts"), largest("wall_error_pts")]


def headline_frame(table: pd.DataFrame) -> pd.DataFrame:
    """The table's HEADLINE columns, in order: what a notebook or a JSON reader sees first."""
    return table[[c for c in HEADLINE if c in table]]
