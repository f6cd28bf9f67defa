"""Every step of a run over time: the period, the bubble and the batch, prefills marked. The lane
chart shows ten steady steps up close; this shows where they sit in the whole run (the ramp-up,
the prefills that interrupt decoding, the tail as streams finish)."""

from __future__ import annotations

import pandas as pd
from matplotlib import transforms
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from .style import DEPTH_COLORS, FULL_WIDTH_IN, OTHER, SMALL_FONT_PT, svg_figure

PERIOD, BUBBLE, BATCH, PREFILL = "#2b3138", "#e07a5f", "#9aa5b1", "#6d597a"


@svg_figure
def step_series(panels: list[tuple[str, pd.DataFrame]], device: str = "GPU") -> Figure:
    """One row per run (a configuration's depths), x the step: period and bubble in ms (left
    axis), batch size (right axis, grey), a tick on top for each prefill step.

    panels: (title, the run's per-step table) per row, in the order drawn.
    """
    fig = Figure(figsize=(FULL_WIDTH_IN, 1.7 * len(panels) + 0.5), layout="constrained")
    axes = fig.subplots(len(panels), 1, squeeze=False, sharex=True)[:, 0]
    for ax, (title, steps) in zip(axes, panels, strict=True):
        steps = steps.sort_values("step")
        ax.plot(steps["step"], steps["period_ms"], color=PERIOD, lw=0.9)
        ax.plot(steps["step"], steps["bubble_ms"], color=BUBBLE, lw=0.9)
        ax.set_ylim(bottom=0)
        ax.set_ylabel("ms", fontsize=SMALL_FONT_PT)
        ax.set_title(title, loc="left", fontsize=SMALL_FONT_PT + 1, color=_depth_color(title))
        batch = ax.twinx()
        batch.step(steps["step"], steps["batch_size"], where="mid", color=BATCH, lw=0.8)
        batch.set_ylim(bottom=0)
        batch.set_ylabel("batch", fontsize=SMALL_FONT_PT, color=BATCH)
        batch.spines["right"].set_visible(True)
        batch.tick_params(labelsize=SMALL_FONT_PT, colors=BATCH)
        ax.tick_params(labelsize=SMALL_FONT_PT)
        prefills = steps.loc[steps["kind"] == "prefill", "step"]
        top = transforms.blended_transform_factory(ax.transData, ax.transAxes)
        ax.plot(prefills, [0.97] * len(prefills), "|", color=PREFILL, ms=7, transform=top)
    axes[-1].set_xlabel("step")
    fig.legend(
        [Line2D([], [], color=c, lw=lw, ls=ls, marker=m) for c, lw, ls, m in _KEYS],
        ["period (ms)", f"{device} bubble (ms)", "batch size", "prefill step"],
        ncol=4,
        loc="outside upper center",
        fontsize=SMALL_FONT_PT,
    )
    return fig


_KEYS = (
    (PERIOD, 1.2, "-", ""),
    (BUBBLE, 1.2, "-", ""),
    (BATCH, 1.2, "-", ""),
    (PREFILL, 0, "", "|"),
)


def _depth_color(title: str) -> str:
    depth = next((d for d in (1, 2) if title.startswith(f"depth {d}")), 0)
    return DEPTH_COLORS.get(depth, OTHER)
