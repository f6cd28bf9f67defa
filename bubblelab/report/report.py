"""One self-contained HTML report per run directory (layout: costmodel/results.py).

`report_run_dir(DIR)` reads DIR/results.json, predicts, draws the figures as inline SVG and renders
templates/report.html.j2 with autoescaping on, so every trace-derived string (phase and kernel
names, run ids, commands, paths) reaches the page escaped. The page loads nothing from outside.
"""

from __future__ import annotations

import datetime as dt
import json
import platform
from pathlib import Path

import jinja2
import numpy as np
import pandas as pd
from markupsafe import Markup

from bubblelab.costmodel.compare import step_summary
from bubblelab.costmodel.perturbation import profiler_perturbation
from bubblelab.costmodel.predict import known_int, predict_blog, predict_runs, run_label
from bubblelab.files import write_atomic
from bubblelab.profiling.analysis import steady_state
from bubblelab.report import figures
from bubblelab.runs.rundir import Results, read_results

REPORT_FILE = "report.html"
HEADLINE = 3  # configurations on the page's headline: the first ones, by a stated rule
TEMPLATES = Path(__file__).parent / "templates"


def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["num"] = lambda v, nd=2: "–" if v is None or pd.isna(v) else f"{v:,.{nd}f}"
    env.filters["dash"] = lambda v: (
        "–" if v is None or (isinstance(v, float) and pd.isna(v)) or v == "" else v
    )
    env.filters["signed"] = lambda v, nd=1: "–" if v is None or pd.isna(v) else f"{v:+.{nd}f}%"
    env.filters["tojson_pretty"] = lambda v: (
        v if isinstance(v, str) else json.dumps(v, indent=1, default=str)
    )
    return env


def timeline_charts(results: Results) -> list[dict]:
    """One lane chart per configuration: its first depth-1 run over its first depth-2 run."""
    by_config: dict[str, dict[int, dict]] = {}
    for run in results.runs.to_dict("records"):
        depth = known_int(run["depth"])  # unknown for a trace of another engine
        by_config.setdefault(run_label(run, depth=False), {}).setdefault(depth or 0, run)
    charts = []
    for title, by_depth in by_config.items():
        panels = []
        for depth, run in sorted(by_depth.items()):
            steps = results.steps[results.steps["run_id"] == run["run_id"]]
            steps = steps[steps["gpu_start_ns"].notna()]  # a last planned step may have no GPU span
            ranges = (
                results.timeline[results.timeline["run_id"] == run["run_id"]]
                if len(results.timeline)
                else None
            )
            if len(steps) >= 2:
                mode = "as traced" if not depth else "blocking" if depth == 1 else "pipelined"
                panels.append((f"depth {depth or '?'} ({mode})", steps, ranges))
        if panels:
            has_host = any(r is not None and len(r) for _, _, r in panels)
            charts.append(
                dict(title=title, svg=Markup(figures.lane_chart(panels)), has_host=has_host)
            )
    return charts


def gap_samples(results: Results) -> list[tuple[str, int, np.ndarray]]:
    """(run label, depth, idle gaps in ms) per configuration and depth, for
    figures.gap_histogram."""
    if len(results.gaps):
        source = results.gaps
    else:  # without a gap table: each step's idle time
        source = results.steps.rename(columns={"bubble_ms": "gap_ms"})
    gaps = {run_id: g["gap_ms"].dropna().to_numpy(float) for run_id, g in source.groupby("run_id")}
    pooled: dict[
        tuple[str, int], list[np.ndarray]
    ] = {}  # repeats of a configuration share a histogram
    for run in results.runs.to_dict("records"):
        pooled.setdefault((run_label(run), known_int(run["depth"]) or 0), []).append(
            gaps.get(run["run_id"], np.array([]))
        )
    return [(label, depth, np.concatenate(arrays)) for (label, depth), arrays in pooled.items()]


def attribution_per_step(results: Results) -> pd.DataFrame:
    """Steady-state bubble per step, split in the proportions of the attribution table.

    The attribution may cover any subset of a run's steps (the profiler's steady state), so it is
    used for shares only; the size of each bar is the run's mean steady-state bubble_ms.
    """
    if results.attribution.empty:
        return results.attribution
    rows = []
    for run in results.runs.to_dict("records"):
        a = results.attribution[results.attribution["run_id"] == run["run_id"]]
        steady = steady_state(results.steps[results.steps["run_id"] == run["run_id"]])
        bubble = float(steady["bubble_ms"].clip(lower=0).mean()) if len(steady) else 0.0
        total = a["bubble_ms"].sum()
        if total > 0:
            for phase, ms in a.groupby("phase")["bubble_ms"].sum().items():
                rows.append(
                    dict(label=run_label(run), phase=phase, ms_per_step=bubble * ms / total)
                )
        else:  # no idle time at all: an empty bar, still labelled
            rows.append(dict(label=run_label(run), phase="other", ms_per_step=0.0))
    # Repeats of a configuration share a bar: the mean over its runs.
    repeats = results.runs.apply(run_label, axis=1).value_counts()
    table = (
        pd.DataFrame(rows)
        .groupby(["label", "phase"], sort=False)["ms_per_step"]
        .sum()
        .reset_index()
    )
    return table.assign(ms_per_step=table["ms_per_step"] / table["label"].map(repeats))


def _machine() -> dict:
    import matplotlib

    return {
        "report built": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "python": platform.python_version(),
        "pandas": pd.__version__,
        "matplotlib": matplotlib.__version__,
        "jinja2": jinja2.__version__,
        "host": platform.node(),
    }


def render_report(results: Results, title: str, n_boot: int = 1000) -> str:
    table = predict_runs(results.runs, results.steps, results.requests, n_boot=n_boot)
    blog = predict_blog()
    attribution = attribution_per_step(results)
    summary = step_summary(results.runs, results.steps)
    # Headline by a stated rule, never by size: the first HEADLINE configurations in the table's
    # order (model, then stream count).
    headline = table.head(HEADLINE)
    perturbation = profiler_perturbation(results.runs, results.steps)
    context = dict(
        title=title,
        runs=results.runs.to_dict("records"),
        devices=sorted(set(map(str, results.runs.get("device", [])))),
        predictions=table.to_dict("records"),
        skipped=table.attrs.get("skipped", []),
        headline=headline.to_dict("records"),
        headline_rule=f"the first {HEADLINE} configurations in model and stream order",
        mean_abs_error=float(table["error_pts"].abs().mean()) if len(table) else None,
        whole_run_error=float(table["wall_error_pts"].abs().max()) if len(table) else None,
        d1_error=float(table["wall_d1_error_pts"].abs().max()) if len(table) else None,
        known=int(table["observed_known"].sum()) if len(table) else 0,
        perturbation=perturbation.to_dict("records"),
        blog=blog.to_dict("records"),
        summary=summary.to_dict("records"),
        fig_pred=Markup(figures.predicted_vs_observed(table, blog)) if len(table) else None,
        fig_whatif=Markup(figures.whatif_curves(table if len(table) else blog)),
        whatif_is_blog=not len(table),
        timelines=timeline_charts(results),
        fig_gaps=Markup(figures.gap_histogram(gaps)) if (gaps := gap_samples(results)) else None,
        gaps_from_steps=results.gaps.empty,
        fig_attr=Markup(figures.attribution_bars(attribution)) if len(attribution) else None,
        provenance=results.provenance,
        machine=_machine(),
    )
    return _env().get_template("report.html.j2").render(**context)


def report_run_dir(run_dir: Path | str, n_boot: int = 1000) -> Path:
    """Write DIR/report.html from DIR/results.json and return its path."""
    run_dir = Path(run_dir)
    results = read_results(run_dir)
    html = render_report(results, title=run_dir.resolve().name, n_boot=n_boot)
    return write_atomic(run_dir / REPORT_FILE, html)
