"""The report's figures, each a function of frames returning an inline SVG string.

Text is rendered as paths (matplotlib's default svg.fonttype), so trace-derived strings such as
phase or kernel names never reach the page as markup.
"""

from __future__ import annotations

import io
import itertools
import re

import matplotlib

matplotlib.use("Agg")  # headless: no display on the machines that build reports
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib import ticker

from bubblelab.costmodel.model import whatif_curve
from bubblelab.profiling.analysis import steady_state

MS = 1e6
GPU_COLORS = {"forward": "#3b6fb6", "prefill": "#1f4e8c", "sampling": "#3aa17e"}
HOST_COLORS = {
    "plan": "#d1495b",
    "launch": "#edae49",
    "finalize": "#8e6cbf",
    "commit": "#7c6a55",
    "wait": "#d9d4cc",
}
OTHER = "#9aa1a9"
# Nested host ranges and trace-specific phases in attribution tables; anything else gets a spare
# colour.
EXTRA_COLORS = {
    **GPU_COLORS,
    "copy_h2d": "#f4d35e",
    "copy_d2h": "#5fa8d3",
    "mask": "#c17fb5",
    "outside any phase": OTHER,
    "other": OTHER,
}
SPARE = ("#e07a5f", "#81b29a", "#6d597a", "#b56576", "#355070", "#eaac8b")
_figure_ids = (f"fig{i}" for i in itertools.count())

plt.rcParams.update(
    {
        "font.family": "DejaVu Sans",
        "font.size": 9,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.edgecolor": "#5b6470",
        "axes.labelcolor": "#2b3138",
        "xtick.color": "#5b6470",
        "ytick.color": "#5b6470",
        "axes.titleweight": "bold",
        "axes.titlesize": 10,
        "legend.frameon": False,
        "svg.fonttype": "path",
        "text.parse_math": False,  # trace names are data: a `$` in one is not mathtext
    }
)


def to_svg(fig) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    svg = buf.getvalue()
    # Inlined into HTML: drop the XML prolog, DOCTYPE and matplotlib's comments (they echo label
    # text), and give the ids a per-figure prefix: several inline SVGs share one id space.
    svg = re.sub(r"<!--.*?-->", "", svg[svg.index("<svg") :], flags=re.S)
    return re.sub(r'(\bid="|href="#|url\(#)', rf"\g<1>{next(_figure_ids)}-", svg)


def _window(steps: pd.DataFrame, n_steps: int, available=None) -> tuple[int, int]:
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


def _per_step_ranges(window: pd.DataFrame) -> pd.DataFrame:
    """GPU lane rebuilt from the per-step table alone (forward then sampling from each
    gpu_start_ns)."""
    w = window.iloc[:-1]
    fwd_end = w["gpu_start_ns"] + w["forward_ms"] * MS
    return pd.concat(
        [
            pd.DataFrame(
                {
                    "lane": "gpu",
                    "phase": "forward",
                    "start_ns": w["gpu_start_ns"],
                    "end_ns": fwd_end,
                }
            ),
            pd.DataFrame(
                {
                    "lane": "gpu",
                    "phase": "sampling",
                    "start_ns": fwd_end,
                    "end_ns": fwd_end + w["sampling_ms"] * MS,
                }
            ),
        ]
    )


def lane_chart(runs: list[tuple[str, pd.DataFrame, pd.DataFrame | None]], n_steps: int = 10) -> str:
    """GPU busy vs host phases over ~n_steps steady-state steps, one panel per run, same time scale.

    runs: (title, per-step table, raw timeline ranges of that run or None). The window is placed by
    step id and timed on the timeline's own clock, so an in-process timeline can illustrate an nsys
    run.
    """
    fig, axes = plt.subplots(len(runs), 1, figsize=(10, 1.55 * len(runs) + 0.5), squeeze=False)
    spans: list[float] = []
    used: dict[str, str] = {}  # phase -> colour, for the legend
    for ax, (title, steps, timeline) in zip(axes[:, 0], runs, strict=True):
        raw = None  # the run's own timeline, when it covers at least two of the steps
        gpu_starts = steps.set_index("step")["gpu_start_ns"]
        if timeline is not None and len(timeline) > 0:
            starts = timeline[timeline["lane"] == "gpu"].groupby("step")["start_ns"].min()
            if steps["step"].isin(starts.index).sum() >= 2:
                raw, gpu_starts = timeline, starts
        first, last = _window(steps, n_steps, gpu_starts.index if raw is not None else None)
        t0, t1 = gpu_starts[first], gpu_starts[last]
        spans.append((t1 - t0) / MS)
        if raw is not None:
            ranges = raw[(raw["end_ns"] > t0) & (raw["start_ns"] < t1)]
        else:
            ranges = _per_step_ranges(
                steps[(steps["step"] >= first) & (steps["step"] <= last)].sort_values("step")
            )
        for lane, y, colors in (("gpu", 1, GPU_COLORS), ("host", 0, HOST_COLORS)):
            # Parents first, so nested ranges (wait inside commit) are drawn on top.
            lane_ranges = ranges[ranges["lane"] == lane].sort_values("start_ns")
            for phase, group in sorted(
                lane_ranges.groupby("phase"), key=lambda kv: kv[0] == "wait"
            ):
                # nested detail (copy_h2d, mask, ...) is left out: the lane shows the tick's phases
                if lane == "host" and phase not in colors:
                    continue
                color = colors.get(phase, OTHER)
                bars = [
                    ((s - t0) / MS, (e - s) / MS)
                    for s, e in zip(group["start_ns"], group["end_ns"], strict=True)
                ]
                ax.broken_barh(
                    bars, (y - 0.38, 0.76), facecolors=color, edgecolor="white", linewidth=0.4
                )
                used.setdefault(phase, color)
        ax.set_yticks([0, 1], ["host", "GPU"])
        ax.set_ylim(-0.6, 1.6)
        ax.set_title(title, loc="left")
        ax.spines["left"].set_visible(False)
        ax.tick_params(axis="y", length=0)
    for ax in axes[:, 0]:
        ax.set_xlim(0, max(spans))
    axes[-1, 0].set_xlabel(f"time (ms) over {n_steps} steady-state steps")
    legend = sorted(
        used,
        key=lambda p: (
            list({**GPU_COLORS, **HOST_COLORS}).index(p)
            if p in GPU_COLORS or p in HOST_COLORS
            else 99
        ),
    )
    handles = [plt.Rectangle((0, 0), 1, 1, color=used[p]) for p in legend]
    fig.legend(handles, legend, ncol=len(legend), loc="upper center", bbox_to_anchor=(0.5, 1.02))
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    return to_svg(fig)


def gap_histogram(gaps_by_run: list[tuple[str, int, np.ndarray]]) -> str:
    """Idle time by gap length (log x axis): each bar is the idle ms in gaps of that length, so
    thousands of sub-microsecond kernel gaps and one bubble per step show on one scale. Depth 1
    filled, depth 2 outlined, one hue per configuration."""
    fig, ax = plt.subplots(figsize=(5.6, 3.4))
    positive = [g[g > 0] for _, _, g in gaps_by_run]
    values = np.concatenate([g for g in positive if len(g)] or [np.array([1e-3, 1.0])])
    lo = max(values.min(), 1e-4) / 2
    hi = max(values.max() * 2, lo * 20)
    bins = np.logspace(np.log10(lo), np.log10(hi), 40).tolist()
    configs = list(dict.fromkeys(label.rsplit(" · depth", 1)[0] for label, _, _ in gaps_by_run))
    cmap = plt.get_cmap("viridis")
    for (label, depth, _), gaps in zip(gaps_by_run, positive, strict=True):
        color = cmap(
            configs.index(label.rsplit(" · depth", 1)[0]) / max(1, len(configs) - 1) * 0.85
        )
        if not len(gaps):
            ax.plot([], [], color=color, lw=1.5, ls=":", label=f"{label}: no idle gaps")
        elif depth == 1:
            ax.hist(
                gaps,
                bins=bins,
                weights=gaps,
                histtype="stepfilled",
                alpha=0.35,
                color=color,
                label=f"{label} ({len(gaps):,} gaps)",
            )
        else:
            ax.hist(
                gaps,
                bins=bins,
                weights=gaps,
                histtype="step",
                lw=1.6,
                color=color,
                label=f"{label} ({len(gaps):,} gaps)",
            )
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(ticker.LogLocator(subs=(1.0, 2.0, 5.0) if hi / lo < 300 else (1.0,)))
    ax.xaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
    ax.xaxis.set_minor_formatter(ticker.NullFormatter())
    ax.set_xlabel("GPU idle gap (ms)")
    ax.set_ylabel("idle time in such gaps (ms)")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=1)
    return to_svg(fig)


def attribution_bars(attribution: pd.DataFrame) -> str:
    """Bubble per step, split by the host phase that was running while the GPU sat idle (one bar per
    run)."""
    table = attribution.pivot_table(
        index="label", columns="phase", values="ms_per_step", aggfunc="sum"
    ).fillna(0)
    table = table.reindex(list(dict.fromkeys(attribution["label"])))  # runs in the report's order
    known = {**HOST_COLORS, **EXTRA_COLORS}
    order = [p for p in known if p in table] + sorted(p for p in table if p not in known)
    spare = iter(SPARE * len(order))
    colors = {p: known.get(p) or next(spare) for p in order}
    table = table[order]
    fig, ax = plt.subplots(figsize=(5.6, 0.42 * len(table) + 1.2))
    left = np.zeros(len(table))
    for phase in order:
        ax.barh(
            table.index,
            table[phase],
            left=left,
            color=colors[phase],
            label=phase,
            edgecolor="white",
            linewidth=0.5,
        )
        left += table[phase].to_numpy()
    ax.set_xlabel("GPU idle per step (ms), by the host phase running meanwhile")
    ax.invert_yaxis()
    ax.legend(
        ncol=min(len(order), 4),
        loc="upper center",
        bbox_to_anchor=(0.5, -0.12 - 0.9 / (len(table) + 2)),
        fontsize=8,
    )
    return to_svg(fig)


def predicted_vs_observed(table: pd.DataFrame, blog: pd.DataFrame | None = None) -> str:
    """Predicted against observed speedup (%), with bootstrap intervals; the post's rows for
    reference.

    The whole-run model is plotted against what it predicts: the wall clock, or for a trace trimmed
    to a window of its run the window's measured token rate (wall_observed_pct).
    """
    fig, ax = plt.subplots(figsize=(5.2, 4.6))
    series = [
        (
            "post's model, steady state",
            "predicted_pct",
            "predicted_lo",
            "predicted_hi",
            "observed_pct",
            "o",
            "#3b6fb6",
        ),
        (
            "from depth 1 alone",
            "d1_predicted_pct",
            "d1_predicted_lo",
            "d1_predicted_hi",
            "observed_pct",
            "s",
            "#8e6cbf",
        ),
        ("whole-run model", "wall_predicted_pct", None, None, "wall_observed_pct", "D", "#3aa17e"),
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
        if observed == "observed_pct":
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
    ax.legend(fontsize=8, loc="upper left")
    return to_svg(fig)


def whatif_curves(table: pd.DataFrame, ks: np.ndarray | None = None) -> str:
    """Predicted speedup as the GPU's step work scales, one curve per device and stream count.

    The x axis is the forward + sampling time of a step. Host bookkeeping does not depend on the
    model, so presets measured on one device sit on one curve (drawn from their median host and idle
    times, anchored at the fastest preset): filled, each preset's measured steady-state speedup;
    hollow, its observed wall-clock speedup.
    """
    fig, ax = plt.subplots(figsize=(8.4, 3.9))
    cmap = plt.get_cmap("viridis")
    groups = list(table.groupby(["device", "streams"], sort=False))
    for i, ((device, streams), g) in enumerate(groups):
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
        label = (
            g["label"].iloc[0]
            if len(g) == 1
            else f"{device} · {streams} stream{'s' if streams > 1 else ''}"
        )
        ax.plot(curve["gpu_ms"], curve["speedup_pct"], color=color, lw=1.6, label=label)
        measured = (g["blocking_ms"] / g["pipelined_ms"] * (1 - g["z"]) - 1) * 100
        ax.plot(g["gpu_ms"], measured, "o", color=color, mec="white", ms=7)
        ax.plot(g["gpu_ms"], g["observed_pct"], "o", mfc="none", mec=color, ms=7, mew=1.4)
        if len(g) > 1 and "preset" in g:
            for x, y, name in zip(g["gpu_ms"], measured, g["preset"], strict=True):
                ax.annotate(
                    str(name),
                    (x, y),
                    textcoords="offset points",
                    xytext=(5, 5),
                    fontsize=7,
                    color=color,
                )
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
    ax.set_xlabel("GPU work per step, forward + sampling (ms)")
    ax.set_ylabel("predicted speedup (%)")
    ax.axhline(0, color="#5b6470", lw=0.6)
    ax.legend(fontsize=7.5)
    return to_svg(fig)


def period_breakdown(summary: pd.DataFrame) -> str:
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
    fig, ax = plt.subplots(figsize=(6.4, 0.42 * len(summary) + 1.2))
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
    ax.legend(
        ncol=3,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.12 - 0.9 / (len(summary) + 2)),
        fontsize=8,
    )
    return to_svg(fig)
