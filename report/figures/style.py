"""The figures' shared look: colours, sizes, a style applied per figure, and SVG output.

Nothing here touches matplotlib's global state: every figure is a `matplotlib.figure.Figure` (no
pyplot, so no backend is chosen and no figure manager keeps it) drawn inside `rc_context(STYLE)`,
so importing the figures in a notebook leaves the user's backend and rcParams as they were.
"""

from __future__ import annotations

import functools
import io
import itertools
import re
from collections.abc import Callable
from typing import Any, ParamSpec

import matplotlib
from matplotlib.figure import Figure

# The report's column is ~1,010 CSS px wide, 10.5 in at matplotlib's 72 pt per inch and 96 px per
# CSS inch: figures up to this width are shown at their own size, so 9-pt text stays 9 pt.
FULL_WIDTH_IN = 10.4
FONT_PT = 9.0
SMALL_FONT_PT = 8.0  # the smallest text any figure draws

MS = 1e6  # ns per ms
GPU_COLORS = {"forward": "#3b6fb6", "prefill": "#1f4e8c", "sampling": "#3aa17e"}
HOST_COLORS = {
    "plan": "#d1495b",
    "launch": "#edae49",
    "finalize": "#8e6cbf",
    "commit": "#7c6a55",
    "wait": "#d9d4cc",
}
DEPTH_COLORS = {
    1: "#d1495b",
    2: "#3b6fb6",
}  # the report's depth pills: red blocking, blue pipelined
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

STYLE: dict[Any, Any] = {  # matplotlib rcParams
    "font.family": "DejaVu Sans",
    "font.size": FONT_PT,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.edgecolor": "#5b6470",
    "axes.labelcolor": "#2b3138",
    "xtick.color": "#5b6470",
    "ytick.color": "#5b6470",
    "axes.titleweight": "bold",
    "axes.titlesize": FONT_PT + 1,
    "legend.frameon": False,
    "legend.fontsize": FONT_PT,
    # Text as paths: trace-derived strings (phase and kernel names) never reach the page as markup.
    "svg.fonttype": "path",
    "text.parse_math": False,  # trace names are data: a `$` in one is not mathtext
}

_figure_ids = (f"fig{i}" for i in itertools.count())
P = ParamSpec("P")


def svg_figure(draw: Callable[P, Figure]) -> Callable[P, str]:
    """Turn a function that draws a Figure into one that returns it as inline SVG, drawn and saved
    under STYLE."""

    @functools.wraps(draw)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> str:
        with matplotlib.rc_context(STYLE):
            return to_svg(draw(*args, **kwargs))

    return wrapper


def to_svg(fig: Figure) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    svg = buf.getvalue()
    # Inlined into HTML: drop the XML prolog, DOCTYPE and matplotlib's comments (they echo label
    # text), and give the ids a per-figure prefix: several inline SVGs share one id space.
    svg = re.sub(r"<!--.*?-->", "", svg[svg.index("<svg") :], flags=re.S)
    return re.sub(r'(\bid="|href="#|url\(#)', rf"\g<1>{next(_figure_ids)}-", svg)
