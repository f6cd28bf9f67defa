"""Figures of the measured step: idle gaps, bubble attribution, where the period goes."""

from __future__ import annotations

import math
import textwrap

import numpy as np
import pandas as pd
from matplotlib import ticker
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from ...core.errors import BubblelabError
from .style import (
    DEPTH_COLORS,
    EXTRA_COLORS,
    FULL_WIDTH_IN,
    GPU_COLORS,
    HOST_COLORS,
    OTHER,
    SMALL_FONT_PT,
    SPARE,
    svg_figure,
)

DEPTH_NAMES = {0: "as traced (depth unknown)", 1: "depth 1 (blocking)", 2: "depth 2 (pipelined)"}
GAP_COLUMNS = 4  # small multiples per row
TITLE_CHARS_PER_IN = 11  # characters of SMALL_FONT_PT text per inch of panel, with room to spare


@svg_figure
def gap_histogram(gaps: list[tuple[str, int, np.ndarray]], device: str = "GPU") -> Figure:
    """Idle time by gap length (log x axis), one small panel per configuration: each bar is the idle
    ms in gaps of that length, so thousands of sub-microsecond kernel gaps and one bubble per step
    show on one scale. Depth 1 filled, depth 2 outlined; one legend of two entries.

    gaps: (configuration, depth, idle gaps in ms) per configuration and depth.
    """
    configs = list(dict.fromkeys(config for config, _, _ in gaps))
    cols = min(GAP_COLUMNS, len(configs))
    rows = math.ceil(len(configs) / cols)
    fig = Figure(figsize=(FULL_WIDTH_IN, 1.9 * rows + 0.7))
    axes = fig.subplots(rows, cols, squeeze=False, sharex=True)
    positive = [g[g > 0] for _, _, g in gaps]
    values = np.concatenate([g for g in positive if len(g)] or [np.array([1e-3, 1.0])])
    lo = max(float(values.min()), 1e-4) / 2
    hi = max(float(values.max()) * 2, lo * 20)
    bins = np.logspace(np.log10(lo), np.log10(hi), 40)
    for (config, depth, _), g in zip(gaps, positive, strict=True):
        ax = axes.flat[configs.index(config)]
        if len(g):
            filled = depth != 2
            ax.hist(
                g,
                bins=bins,
                weights=g,
                histtype="stepfilled" if filled else "step",
                alpha=0.45 if filled else 1.0,
                lw=0 if filled else 1.4,
                color=DEPTH_COLORS.get(depth, OTHER),
            )
    for i, ax in enumerate(axes.flat):
        if i >= len(configs):
            ax.set_visible(False)
            continue
        # Wrapped to the panel's width: long configuration names ran into the next panel's.
        title = textwrap.fill(configs[i], width=int(TITLE_CHARS_PER_IN * FULL_WIDTH_IN / cols))
        ax.set_title(title, loc="left", fontsize=SMALL_FONT_PT, fontweight="normal")
        ax.set_xscale("log")
        subs = (1.0, 2.0, 5.0) if hi / lo < 300 else (1.0,)
        ax.xaxis.set_major_locator(ticker.LogLocator(subs=subs, numticks=8))
        ax.xaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
        ax.xaxis.set_minor_formatter(ticker.NullFormatter())
        ax.tick_params(labelsize=SMALL_FONT_PT)
        if i % cols == 0:
            ax.set_ylabel("idle ms in such gaps", fontsize=SMALL_FONT_PT)
        if i >= len(configs) - cols:
            ax.set_xlabel(f"{device} idle gap (ms)", fontsize=SMALL_FONT_PT)
    depths = sorted({d for _, d, _ in gaps})
    handles = [
        Patch(facecolor=DEPTH_COLORS.get(d, OTHER), alpha=0.45, lw=0)
        if d != 2
        else Patch(facecolor="none", edgecolor=DEPTH_COLORS[2], lw=1.4)
        for d in depths
    ]
    fig.legend(
        handles,
        [DEPTH_NAMES.get(d, f"depth {d}") for d in depths],
        ncol=len(depths),
        loc="upper center",
        bbox_to_anchor=(0.5, 1.0),
    )
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / fig.get_figheight()))
    return fig


@svg_figure
def attribution_bars(
    attribution: pd.DataFrame, device: str = "GPU", split: str = "time_ms"
) -> Figure:
    """Bubble per step by host phase: one panel per depth (each on its own scale, so depth 2's few
    microseconds are readable too), one bar per configuration.

    attribution: config, depth, phase and the splits in ms per step
    (report.summary.attribution_per_step); split: the one drawn, time_ms (the phase running while
    the device sat idle) or began_ms (the phase open when each idle gap began).
    """
    if attribution.empty:
        raise BubblelabError("no bubble was attributed to a host phase: no bars to draw")
    configs = list(dict.fromkeys(attribution["config"]))
    depths = sorted(attribution["depth"].unique())
    known = {**HOST_COLORS, **EXTRA_COLORS}
    phases = list(dict.fromkeys(attribution["phase"]))
    order = [p for p in known if p in phases] + sorted(p for p in phases if p not in known)
    spare = iter(SPARE * len(order))
    colors = {p: known.get(p) or next(spare) for p in order}
    ncol = min(len(order), 8)
    top = 0.3 * math.ceil(len(order) / ncol) + 0.1  # the legend's rows, above the panels
    # the panels keep their height whatever the legend takes (another engine's trace may name a
    # dozen host activities: tight_layout found no room for them)
    fig = Figure(figsize=(FULL_WIDTH_IN, 0.28 * len(configs) + 1.3 + top))
    axes = fig.subplots(1, len(depths), squeeze=False, sharey=True)[0]
    for ax, depth in zip(axes, depths, strict=True):
        table = (
            attribution[attribution["depth"] == depth]
            .pivot_table(index="config", columns="phase", values=split, aggfunc="sum")
            .reindex(index=configs, columns=order)
            .fillna(0.0)
        )
        left = np.zeros(len(table))
        for phase in order:
            ax.barh(
                table.index,
                table[phase],
                left=left,
                color=colors[phase],
                edgecolor="white",
                linewidth=0.5,
                height=0.72,
            )
            left += table[phase].to_numpy()
        ax.set_title(DEPTH_NAMES.get(depth, f"depth {depth}"), loc="left")
        ax.set_xlabel(f"{device} idle per step (ms)")
        ax.set_xlim(left=0)
        ax.tick_params(axis="y", length=0)
    axes[0].invert_yaxis()
    handles = [Patch(color=colors[p]) for p in order]
    fig.legend(handles, order, ncol=ncol, loc="upper center", bbox_to_anchor=(0.5, 1.0))
    fig.tight_layout(rect=(0, 0, 1, 1 - top / fig.get_figheight()))
    return fig


@svg_figure
def period_breakdown(summary: pd.DataFrame) -> Figure:
    """Where each run's steady-state period goes (compare.step_summary): kernels running, gaps
    between a step's own kernels (depth 2 keeps them), and the bubble (period - forward - sampling:
    what it hides)."""
    gaps = summary["kernel_gap_ms"].fillna(0) if "kernel_gap_ms" in summary else 0.0
    parts = {
        "kernels": summary["gpu_ms"] - gaps,
        "kernel gaps": gaps,
        "bubble": (summary["period_ms"] - summary["gpu_ms"]).clip(lower=0),
    }
    colors = {
        "kernels": GPU_COLORS["forward"],
        "kernel gaps": "#9fc0e8",
        "bubble": HOST_COLORS["plan"],
    }
    fig = Figure(figsize=(7.5, 0.3 * len(summary) + 1.3))
    ax = fig.subplots()
    left = np.zeros(len(summary))
    for name, ms in parts.items():
        ms = np.broadcast_to(np.asarray(ms, dtype=float), left.shape)
        ax.barh(
            summary["label"],
            ms,
            left=left,
            color=colors[name],
            label=name,
            edgecolor="white",
            linewidth=0.5,
        )
        left += ms
    ax.set_xlabel("steady-state period per step (ms, medians)")
    ax.invert_yaxis()
    ax.legend(ncol=3, loc="lower center", bbox_to_anchor=(0.5, 1.0))
    return fig
