"""Figures of the cost model: predicted against observed, and what a faster GPU would win."""

from __future__ import annotations

import matplotlib
import numpy as np
import pandas as pd
from matplotlib import ticker
from matplotlib.figure import Figure

from ...core.words import counted
from ...costmodel.model import whatif_curve
from .style import FULL_WIDTH_IN, OTHER, SMALL_FONT_PT, svg_figure

MAX_NAMED = 3  # points named on a what-if curve


@svg_figure
def predicted_vs_observed(table: pd.DataFrame, blog: pd.DataFrame | None = None) -> Figure:
    """Predicted against observed speedup (%), with 95% intervals: first the forecast from the
    depth-1 run alone (the whole-run model, against the wall clock or, for a trace trimmed to a
    window of its run, the window's measured token rate: wall_observed_pct), then the post's
    per-step model, which reads depth 2's period; the post's rows for reference. The whole-run
    model fed depth 2's own pieces is not drawn: it reads the run it would be judged against.
    """
    fig = Figure(figsize=(5.0, 4.6))
    ax = fig.subplots()
    series = [
        (
            "forecast from depth 1 alone",
            "wall_d1_predicted_pct",
            "wall_d1_predicted_lo",
            "wall_d1_predicted_hi",
            "wall_observed_pct",
            "s",
            "#8e6cbf",
        ),
        (
            "post's model, steady state (reads depth 2)",
            "predicted_pct",
            "predicted_lo",
            "predicted_hi",
            "observed_pct",
            "o",
            "#3b6fb6",
        ),
    ]
    points = []
    if blog is not None and len(blog):
        ax.scatter(
            blog["predicted_pct"],
            blog["observed_pct"],
            marker="x",
            color=OTHER,
            label="Photon post",
        )
        points += [blog["predicted_pct"], blog["observed_pct"]]
    for label, col, lo, hi, observed, marker, color in series:
        if col not in table or table[col].isna().all():
            continue
        observed = observed if observed in table else "observed_pct"
        xerr = yerr = None
        if lo and lo in table:
            xerr = np.vstack([table[col] - table[lo], table[hi] - table[col]]).clip(min=0)
        whole_runs = "wall_scope" in table and (table["wall_scope"] == "run").all()
        if observed == "observed_pct" or whole_runs:  # whole runs: the same observed speedup
            yerr = np.vstack(
                [
                    table["observed_pct"] - table["observed_lo"],
                    table["observed_hi"] - table["observed_pct"],
                ]
            ).clip(min=0)
        ax.errorbar(
            table[col],
            table[observed],
            xerr=xerr,
            yerr=yerr,
            fmt=marker,
            color=color,
            ms=6,
            capsize=2,
            label=label,
        )
        points += [table[col], table[observed]]
    allv = pd.concat(points) if points else pd.Series([0.0, 1.0])
    low, high = float(allv.min()), float(allv.max())
    pad = 0.1 * (high - low) + 1
    diagonal = [low - pad, high + pad]
    ax.plot(diagonal, diagonal, color="#5b6470", lw=0.8, ls="--", zorder=0)
    ax.set_xlim(*diagonal)
    ax.set_ylim(*diagonal)
    ax.set_xlabel("predicted speedup (%)")
    ax.set_ylabel("observed speedup (%)")
    ax.legend(fontsize=SMALL_FONT_PT, loc="upper left")
    return fig


@svg_figure
def whatif_curves(table: pd.DataFrame, ks: np.ndarray | None = None, device: str = "GPU") -> Figure:
    """Predicted speedup as the GPU's step work scales, one curve per device and stream count.

    The x axis is the forward + sampling time of a step. Host bookkeeping does not depend on the
    model, so presets measured on one device sit on one curve (drawn from their median host and idle
    times, anchored at the fastest preset): filled, each preset's measured steady-state speedup;
    hollow, its observed wall-clock speedup.
    """
    fig = Figure(figsize=(FULL_WIDTH_IN * 0.85, 3.9))
    ax = fig.subplots()
    cmap = matplotlib.colormaps["viridis"]
    groups = list(table.groupby(["device", "streams"], sort=False))
    for i, ((on, streams), g) in enumerate(groups):
        color = cmap(i / max(1, len(groups) - 1) * 0.85)
        gpu = float(g["gpu_ms"].min())
        curve = whatif_curve(
            gpu + float((g["blocking_ms"] - g["gpu_ms"]).median()),
            gpu + float((g["pipelined_ms"] - g["gpu_ms"]).median()),
            gpu,
            float(g["host_ms"].median()),
            float(g["z"].median()),
            ks,
        )
        label = g["label"].iloc[0] if len(g) == 1 else f"{on} · {counted(streams, 'stream')}"
        ax.plot(curve["gpu_ms"], curve["speedup_pct"], color=color, lw=1.6, label=label)
        measured = (g["blocking_ms"] / g["pipelined_ms"] * (1 - g["z"]) - 1) * 100
        ax.plot(g["gpu_ms"], measured, "o", color=color, mec="white", ms=7)
        ax.plot(g["gpu_ms"], g["observed_pct"], "o", mfc="none", mec=color, ms=7, mew=1.4)
        # Names beside the points while they stay legible; more than a few overlap.
        if 1 < len(g) <= MAX_NAMED and "preset" in g:
            for x, y, name in zip(g["gpu_ms"], measured, g["preset"], strict=True):
                ax.annotate(
                    str(name),
                    (x, y),
                    textcoords="offset points",
                    xytext=(5, 5),
                    fontsize=SMALL_FONT_PT,
                    color=color,
                )
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
    ax.set_xlabel(f"{device} work per step, forward + sampling (ms)")
    ax.set_ylabel("predicted speedup (%)")
    ax.axhline(0, color="#5b6470", lw=0.6)
    ax.legend(fontsize=SMALL_FONT_PT)
    return fig
