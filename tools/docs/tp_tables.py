"""The tensor-parallel study's numbers (issue #27), from the committed measurements: the per-run
rows of benchmarks/tp_sweep.py's JSON summarised per configuration, and the tables of
docs/tensor-parallel.md (tools/docs/generated.py renders them; benchmarks/tp_study_report.py draws
the figure from the same summary)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
STUDY = ROOT / "docs" / "measurements" / "2026-11-26" / "tp-study"
SWEEPS = (STUDY / "tp-sweep-8b.json", STUDY / "tp-sweep-32b.json")
KEYS = ["preset", "streams", "tp", "depth"]


def _by_size(preset: str) -> float:
    """qwen3-8b before qwen3-32b: presets in the order of their parameter counts."""
    return float(preset.split("-")[1][:-1])


def flatten(docs: list[dict]) -> pd.DataFrame:
    """One row per run: rank 0's forward and handoff, each rank's bubble and the largest."""
    rows = []
    for doc in docs:
        for r in doc["runs"]:
            ranks = r["ranks"]
            bubbles = [x.get("bubble_ms", np.nan) for x in ranks]
            rows.append({
                **{k: r[k] for k in (*KEYS, "repeat", "tokens_per_s", "step_ms_median")},
                "gpu": doc["gpu"],
                "forward_ms": ranks[0].get("forward_ms", np.nan),
                "bubble_ms": float(np.nanmax(bubbles)),
                "bubble_rank0_ms": bubbles[0],
                "bubble_rank1_ms": bubbles[1] if len(bubbles) > 1 else np.nan,
                "handoff_us": ranks[0].get("handoff_us_median", np.nan),
            })  # fmt: skip
    return pd.DataFrame(rows)


def summary(runs: pd.DataFrame) -> pd.DataFrame:
    """Medians over repeats per configuration; depth 2's gain over depth 1 in tokens/s, per repeat
    pair (the depths ran back to back), median and range; the step against TP 1's."""
    table = runs.groupby(KEYS).median(numeric_only=True).reset_index()
    table["repeats"] = runs.groupby(KEYS).size().values
    pairs = runs.pivot_table(
        index=["preset", "streams", "tp", "repeat"], columns="depth", values="tokens_per_s"
    ).dropna()
    gain = (pairs[2] / pairs[1] - 1) * 100
    by = gain.groupby(level=["preset", "streams", "tp"])
    stats = pd.DataFrame({"gain_pct": by.median(), "gain_min": by.min(), "gain_max": by.max()})
    table = table.merge(stats.reset_index(), on=["preset", "streams", "tp"], how="left")
    tp1 = table[table.tp == 1].set_index(["preset", "streams", "depth"]).step_ms_median
    index = pd.MultiIndex.from_frame(table[["preset", "streams", "depth"]])
    table["step_vs_tp1"] = table.step_ms_median.values / tp1.reindex(index).values
    return table


def study() -> pd.DataFrame:
    return summary(flatten([json.loads(p.read_text()) for p in SWEEPS]))


def tp_study() -> str:
    """docs/tensor-parallel.md: the depth-1 bubble per rank and what depth 2 buys, TP 1 and 2."""
    t = study().set_index(KEYS)
    lines = [
        "| model | streams | depth-1 bubble ms, TP 1 | TP 2, rank 0 / rank 1 | depth 2 buys, TP 1 "
        "| TP 2 | TP-2 step / TP 1 (depth 2) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for preset in sorted({k[0] for k in t.index}, key=_by_size):
        for s in sorted({k[1] for k in t.index if k[0] == preset}):
            one, two = t.loc[(preset, s, 1, 1)], t.loc[(preset, s, 2, 1)]
            g1, g2 = t.loc[(preset, s, 1, 2)], t.loc[(preset, s, 2, 2)]
            lines.append(
                f"| {preset} | {s} | {one.bubble_rank0_ms:.3f} | {two.bubble_rank0_ms:.3f} / "
                f"{two.bubble_rank1_ms:.3f} | {g1.gain_pct:+.1f}% | {g2.gain_pct:+.1f}% | "
                f"{g2.step_vs_tp1:.3f} |"
            )
    return "\n".join(lines)


def tp_heldout() -> str:
    """docs/tensor-parallel.md: the TP held-out set, observed against the forecast from depth 1."""
    rows = json.loads((STUDY / "heldout-tp" / "rows.json").read_text())["rows"]
    lines = [
        "| id | configuration | observed [95%] | forecast from depth 1 | miss |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        known = "" if r["observed_known"] else " ?"
        lines.append(
            f"| {r['id']} | {r['preset']}, {r['streams']} stream{'s' if r['streams'] > 1 else ''}"
            f", L {r['L']:.0f} | {r['observed_pct']:+.1f}% [{r['observed_lo']:+.1f}, "
            f"{r['observed_hi']:+.1f}]{known} | {r['wall_d1_predicted_pct']:+.1f}% | "
            f"{r['wall_d1_error_pts']:+.1f} pts |"
        )
    return "\n".join(lines)


def tp_readme() -> str:
    """README: what depth 2 buys at TP 1 and at TP 2, per model, over the stream counts measured."""
    t = study()
    gains = t[t.depth == 2].groupby(["preset", "tp"])["gain_pct"].agg(["min", "max"])
    streams = sorted(t.streams.unique())
    parts = [
        f"{preset}: {gains.loc[(preset, 2), 'min']:+.1f} to {gains.loc[(preset, 2), 'max']:+.1f}% "
        f"at TP 2 against {gains.loc[(preset, 1), 'min']:+.1f} to "
        f"{gains.loc[(preset, 1), 'max']:+.1f}% at TP 1"
        for preset in sorted({p for p, _ in gains.index}, key=_by_size)
    ]
    return (
        "What tensor parallelism does to the bubble, measured on two H200s "
        '(docs/tensor-parallel.md, "Measured on two H200s"): the depth-1 bubble a step does not '
        "shrink with TP while the forward does, so depth 2 buys more at TP 2 ("
        + "; ".join(parts)
        + f", {streams[0]}-{streams[-1]} streams); docs/tp-study.png has a panel per stream count."
    )
