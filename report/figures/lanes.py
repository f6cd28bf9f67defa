"""The lane chart: host phases against device work over a few steady steps, one panel per run."""

from __future__ import annotations

from collections.abc import Collection

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from ...profiling.analysis import steady_state
from ...runs.tables import spans_from_steps
from .style import (
    FULL_WIDTH_IN,
    GPU_COLORS,
    HOST_COLORS,
    MS,
    OTHER,
    svg_figure,
)

Panel = tuple[str, pd.DataFrame, pd.DataFrame | None, str]  # title, steps, raw ranges, device word


def window(
    steps: pd.DataFrame, n_steps: int, available: Collection | None = None
) -> tuple[int, int]:
    """n_steps consecutive steady-state steps (no prefill in between), as near the run's middle as
    possible.

    available: step ids the raw timeline covers (it may hold only a window of the run).
    """
    steady = steady_state(steps)
    if available is not None:
        steady, steps = steady[steady["step"].isin(available)], steps[steps["step"].isin(available)]
    ids = steady["step"].to_numpy()
    if len(ids) <= n_steps:
        ids = steps["step"].sort_values().to_numpy()
    starts = [i for i in range(len(ids) - n_steps) if ids[i + n_steps] - ids[i] == n_steps]
    middle = (len(ids) - n_steps) // 2
    i = min(starts, key=lambda i: abs(i - middle)) if starts else max(0, middle)
    return int(ids[i]), int(ids[min(i + n_steps, len(ids) - 1)])


@svg_figure
def lane_chart(panels: list[Panel], n_steps: int = 10) -> Figure:
    """Device busy vs host phases over ~n_steps steady-state steps, one panel per run, same time
    scale.

    panels: (title, per-step table, raw timeline ranges of that run or None, "GPU" or "CPU"). The
    window is placed by step id and timed on the timeline's own clock, so an in-process timeline can
    illustrate an nsys run.
    """
    fig = Figure(figsize=(FULL_WIDTH_IN, 1.45 * len(panels) + 0.6))
    axes = fig.subplots(len(panels), 1, squeeze=False)[:, 0]
    spans: list[float] = []
    used: dict[str, str] = {}  # phase -> colour, for the legend
    for ax, (title, steps, timeline, device) in zip(axes, panels, strict=True):
        raw = None  # the run's own timeline, when it covers at least two of the steps
        gpu_starts = steps.set_index("step")["gpu_start_ns"]
        if timeline is not None and len(timeline) > 0:
            starts = timeline[timeline["lane"] == "gpu"].groupby("step")["start_ns"].min()
            if steps["step"].isin(starts.index).sum() >= 2:
                raw, gpu_starts = timeline, starts
        first, last = window(steps, n_steps, gpu_starts.index if raw is not None else None)
        t0, t1 = gpu_starts[first], gpu_starts[last]
        spans.append((t1 - t0) / MS)
        if raw is not None:
            ranges = raw[(raw["end_ns"] > t0) & (raw["start_ns"] < t1)]
        else:
            shown = steps[(steps["step"] >= first) & (steps["step"] < last)]
            ranges = spans_from_steps(shown.sort_values("step"))
        for lane, y, colors in (("gpu", 1, GPU_COLORS), ("host", 0, HOST_COLORS)):
            # Parents first, so nested ranges (wait inside commit) are drawn on top.
            lane_ranges = ranges[ranges["lane"] == lane].sort_values("start_ns")
            for phase, group in sorted(
                lane_ranges.groupby("phase"), key=lambda kv: kv[0] == "wait"
            ):
                # nested detail (copy_h2d, mask, ...) is left out: the lane shows the tick's phases
                if lane == "host" and phase not in colors:
                    continue
                color = colors.get(str(phase), OTHER)
                bars = [
                    ((s - t0) / MS, (e - s) / MS)
                    for s, e in zip(group["start_ns"], group["end_ns"], strict=True)
                ]
                ax.broken_barh(
                    bars, (y - 0.38, 0.76), facecolors=color, edgecolor="white", linewidth=0.4
                )
                used.setdefault(str(phase), color)
        ax.set_yticks([0, 1], ["host", device])
        ax.set_ylim(-0.6, 1.6)
        ax.set_title(title, loc="left")
        ax.spines["left"].set_visible(False)
        ax.tick_params(axis="y", length=0)
    for ax in axes:
        ax.set_xlim(0, max(spans))
    axes[-1].set_xlabel(f"time (ms) over {n_steps} steady-state steps")
    known = list({**GPU_COLORS, **HOST_COLORS})
    legend = sorted(used, key=lambda p: known.index(p) if p in known else len(known))
    handles = [Rectangle((0, 0), 1, 1, color=used[p]) for p in legend]
    fig.legend(handles, legend, ncol=len(legend), loc="upper center", bbox_to_anchor=(0.5, 1.0))
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / fig.get_figheight()))
    return fig
