"""`bubblelab compare A B --html PAGE`: report.diff's tables as one self-contained page, styled as
the report (no scripts, nothing from outside; trace-derived names escaped)."""

from __future__ import annotations

import jinja2

from .diff import (
    KEPT_GPU_WORK,
    Comparison,
    foreseen_rows,
    percent_change,
    row_figures,
    unprofiled_words,
    z_words,
)
from .report import TEMPLATES


def render_comparison(comparison: Comparison) -> str:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True, undefined=jinja2.StrictUndefined
    )
    env.globals["row_figures"] = row_figures
    env.filters["signed"] = percent_change
    records = comparison.to_dict()
    tables = [
        dict(id="steps", title="Steady-state step (medians)", what="metric", pct=True,
             rows=records["steps"], empty="No steady-state steps in common."),
        dict(id="attribution", title="Bubble by host phase, mean ms per steady step", what="phase",
             pct=False, rows=records["attribution"], empty="No bubble attribution in either."),
        dict(id="kernels", title="Kernels, GPU ms per step", what="kernel", pct=False,
             rows=records["kernels"],
             empty="Kernels need a catalog on both sides (a trace, or a run directory with "
             "catalog.duckdb)."),
    ]  # fmt: skip
    return env.get_template("compare.html.j2").render(
        a=comparison.names[0],
        b=comparison.names[1],
        tables=tables,
        kernels=bool(records["kernels"]),
        kept_gpu_work=KEPT_GPU_WORK,
        foreseen=[
            dict(
                entry,
                rows=foreseen_rows(entry),
                unprofiled=unprofiled_words(entry),
                z_words=z_words(entry),
            )
            for entry in comparison.foreseen
        ],
    )
