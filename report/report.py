"""One self-contained HTML report of one run directory, or of several side by side.

`report_run_dir(DIR)` writes DIR/report.html; `report_dirs([DIR1, DIR2, ...], OUT)` one page for
all of them. Both write the exports (report.export) into an `export/` folder beside the page and
link them. The page is templates/report.html.j2 rendered with autoescaping on, so every
trace-derived string (phase and kernel names, run ids, commands, paths) reaches it escaped; it loads
nothing from outside.
"""

from __future__ import annotations

from concurrent.futures import Future
from contextlib import ExitStack
from pathlib import Path

import jinja2
import pandas as pd
from markupsafe import Markup

from ..core.errors import BubblelabError
from ..core.files import write_atomic
from ..costmodel.blog import predict_blog
from ..costmodel.configs import known_int
from ..costmodel.forecast import one_depth, unchecked_forecast
from ..costmodel.headline import caveat_lines, explanation, handoff_lines, pct_text
from ..costmodel.observed import process_labels
from ..costmodel.perturbation import profiler_perturbation
from ..costmodel.power import power_limit_w
from ..costmodel.predict import predict_runs
from ..costmodel.spread import source_lines
from ..runs.merge import distinct_names, merge_results
from ..runs.rundir import Results
from ..runs.sources import Source, open_source
from ..runs.split_sweep import split_line
from . import figures, provenance, summary
from .compare import side_by_side
from .diff import percent_change
from .export import (
    OP_STEPS,
    TRACE_FILE,
    Exported,
    export_results,
    exporting_apart,
    op_scope,
    op_tables,
    ranges_of,
)
from .kernels import kernel_sections
from .labels import device_word, run_name
from .ranks import rank_sections
from .split import split_sections
from .steps_found import found_sections, steps_found
from .trace_forecast import forecast_sections

REPORT_FILE = "report.html"
EXPORT_DIR = "export"
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
    env.filters["signed"] = percent_change  # the comparison page's, one decimal
    env.filters["dash"] = lambda v: (
        "–" if v is None or (isinstance(v, float) and pd.isna(v)) or v == "" else v
    )
    env.globals.update(explain=explanation)
    return env


def timeline_charts(results: Results) -> list[dict]:
    """One lane chart per configuration: its first depth-1 run over its first depth-2 run; and
    `series`, every step of the same runs over time (figures.step_series)."""
    by_config: dict[str, dict[int, dict]] = {}
    for run in results.runs.to_dict("records"):
        depth = known_int(run["depth"]) or 0  # unknown for a trace of another engine
        by_config.setdefault(run_name(run, depth=False), {}).setdefault(depth, run)
    charts = []
    for title, by_depth in by_config.items():
        panels, series = [], []
        for depth, run in sorted(by_depth.items()):
            steps = results.steps[results.steps["run_id"] == run["run_id"]]
            steps = steps[steps["gpu_start_ns"].notna()]  # a last planned step may have no GPU span
            timeline = results.timeline
            ranges = timeline[timeline["run_id"] == run["run_id"]] if len(timeline) else None
            if len(steps) >= 2:
                mode = "as traced" if not depth else "blocking" if depth == 1 else "pipelined"
                name = f"depth {depth or '?'} ({mode})"
                panels.append((name, steps, ranges, device_word([run["device"]])))
                series.append((f"{name} · every step of run {run['run_id']}", steps))
        if panels:
            has_host = any(r is not None and len(r) for _, _, r, _ in panels)
            charts.append(
                dict(
                    title=title,
                    svg=Markup(figures.lane_chart(panels)),
                    has_host=has_host,
                    series=Markup(figures.step_series(series, device=panels[0][3])),
                )
            )
    return charts


def render_report(
    results: Results,
    title: str,
    n_boot: int = 1000,
    exported: Exported | Future[Exported] | None = None,
    table: pd.DataFrame | None = None,
    kernels: list[dict] | None = None,
    splits: list[dict] | None = None,
    found: list[dict] | None = None,
    forecasts: list[dict] | None = None,
    depth1: pd.DataFrame | None = None,
) -> str:
    """The page. exported: the files written beside it, linked relative to it (EXPORT_DIR/); a
    future of them is waited for once the figures are drawn.
    kernels: the "Kernels" section's runs (report.kernels.kernel_sections; none: no section).
    splits: another engine split over GPUs (report.split.split_sections; none: no section).
    found: how another engine's steps were found, run by run (report.steps_found.found_sections).
    forecasts: what pipelining would buy another engine's runs (report.trace_forecast).
    table: predict_runs of these results when the caller has it already (run-and-profile prints
    it too; the bootstrap is the page's slowest part); depth1: unchecked_forecast's likewise."""
    if table is None:
        table = predict_runs(
            results.runs, results.steps, results.requests, ranks=results.ranks, n_boot=n_boot,
            power_limit_w=power_limit_w(results.provenance),
        )  # fmt: skip
    blog = predict_blog()
    # runs at depth 1 only, unless forecast from their traces (report.trace_forecast) already
    if forecasts:
        depth1 = pd.DataFrame()
    elif depth1 is None:
        depth1 = unchecked_forecast(
            results.runs, results.steps, results.requests, results.ranks, n_boot,
            power_limit_w=power_limit_w(results.provenance),
        )  # fmt: skip
    caveats1 = caveat_lines(depth1) if len(depth1) else []
    halves = [line] if (line := split_line(results.provenance)) else []  # one sweep in two
    measured = summary.unprofiled(results)  # what the engine does; the profiler's own section
    configs = summary.config_table(measured)
    together = _confirmed_together(splits or [])
    _mark_unsure(configs, found or [], together)
    attribution = summary.attribution_per_step(measured)
    split = summary.headline_split(attribution)
    gaps = summary.gap_samples(measured)
    devices = provenance.device_names(results.runs)
    word = device_word(results.runs["device"])
    context = dict(
        title=title,
        device=word,
        runs=results.runs.to_dict("records"),
        devices=devices,
        headline=summary.headline(table, configs),
        perturbation=profiler_perturbation(results.runs, results.steps).to_dict("records"),
        predictions=summary.with_repeat_stops(table, results.provenance).to_dict("records"),
        skipped=[*table.attrs.get("skipped", []), *depth1.attrs.get("skipped", [])],
        caveats=[*caveat_lines(table), *handoff_lines(table), *halves] if len(table) else caveats1,
        halves=halves,
        processes=_processes(measured.runs),
        noise_sources=source_lines(table, measured.steps) if len(table) else [],
        blog=blog.to_dict("records"),
        configs=configs,
        step_columns=summary.step_columns(configs, word),
        ranks=rank_sections(measured),
        compare=side_by_side(results, table),
        fig_pred=Markup(figures.predicted_vs_observed(table, blog)) if len(table) else None,
        fig_whatif=Markup(figures.whatif_curves(table if len(table) else blog, device=word)),
        whatif_is_blog=not len(table),
        timelines=timeline_charts(measured),
        fig_gaps=Markup(figures.gap_histogram(gaps, device=word)) if gaps else None,
        gaps_from_steps=measured.gaps.empty,
        profiled_left_out=len(results.runs) - len(measured.runs),
        one_depth=one_depth(results.runs),  # why nothing is predicted
        depth1=_depth1_rows(depth1),
        fig_attr=Markup(figures.attribution_bars(attribution, device=word, split=split))
        if len(attribution)
        else None,
        attr_split=split,
        attr_parts=summary.attribution_parts(attribution),
        sources=provenance.sources(results, title),
        machine=provenance.report_facts(),
        exports=_links(exported),
        kernels=kernels or [],
        splits=splits or [],
        found=found or [],
        forecasts=forecasts or [],
        unsure=[f for f in found or [] if not f["sure"]],
        together=together,
    )
    return _env().get_template("report.html.j2").render(**context)


def _depth1_rows(forecast: pd.DataFrame) -> list[dict]:
    """unchecked_forecast's rows, each figure's text as the console's (?: not known to ±1 pt)."""
    rows = forecast.to_dict("records")
    for r in rows:
        value, lo, hi = (r[f"wall_d1_predicted{k}"] for k in ("_pct", "_lo", "_hi"))
        r["big"], _, r["ci"] = pct_text(value, lo, hi, r["wall_d1_predicted_known"]).partition(" ")
    return rows


def _processes(runs: pd.DataFrame) -> int:
    """How many worker processes made these runs (runs.repeats spreads pairs over them), counted
    as the observed speedup's interval counts them (unlabelled: process 1)."""
    return len(set(process_labels(runs.get("process"), len(runs))))


def _confirmed_together(splits: list[dict]) -> set[str]:
    """The runs of an engine split over GPUs whose steps the sure split confirms (a worker unsure
    on its own, its steps matched to rank 0's sure ones)."""
    return {run_id for s in splits if s.get("sure") for run_id in s.get("run_ids", [])}


def _mark_unsure(configs: list[dict], found: list[dict], together: set[str]) -> None:
    """Mark each row of the step table that stands on a run whose steps are not sure (and that no
    sure rank 0 confirms), as `bubblelab analyze` marks its cells ~: the card on how the steps
    were found says why, but a figure copied from the table must carry its doubt with it."""
    unsure = {f["run_id"] for f in found if not f["sure"]} - together
    for row in configs:
        row["unsure"] = bool(unsure & set(row["run_ids"]))


def report_run_dir(
    source: Path | str,
    n_boot: int = 1000,
    export: bool = True,
    out: Path | None = None,
    table: pd.DataFrame | None = None,
    depth1: pd.DataFrame | None = None,
) -> Path:
    """Write the page of a run directory (DIR/report.html) or of one nsys export (out, default
    NAME-report/report.html here), with export/ beside it; returns the page's path. table, depth1:
    the source's predict_runs and unchecked_forecast, if the caller made them."""
    source = Path(source)
    opened = open_source(source)
    if out is None:
        folder = source if source.is_dir() else Path(f"{opened.name}-report")
        out = folder / REPORT_FILE
    title = source.resolve().name if source.is_dir() else opened.name
    # A run directory's catalog can be read by a second process: its export is made there, beside
    # the page's figures. A trace is ingested in memory here, so its export is made here too.
    apart = source if opened.catalog is not None and source.is_dir() else None
    return _write([opened], Path(out), title, n_boot, export, table, apart, depth1)


def report_dirs(
    run_dirs: list[Path],
    out: Path,
    title: str | None = None,
    n_boot: int = 1000,
    export: bool = True,
) -> Path:
    """One page for several run directories (machines, commits or models side by side) at out."""
    if len(run_dirs) < 2:
        raise BubblelabError("report_dirs compares two or more run directories")
    opened = [open_source(d) for d in run_dirs]
    for source, name in zip(opened, distinct_names(run_dirs), strict=True):
        source.name = name
    title = title or " · ".join(s.name for s in opened)
    return _write(opened, Path(out), title, n_boot, export)


def _write(
    sources: list[Source],
    out: Path,
    title: str,
    n_boot: int,
    export: bool,
    table: pd.DataFrame | None = None,
    apart: Path | None = None,
    depth1: pd.DataFrame | None = None,
) -> Path:
    """apart: the run directory to export from in a process of its own (report.export)."""
    if len(sources) == 1:
        results = sources[0].results
    else:
        results = merge_results({s.name: s.results for s in sources})
        for source in sources:  # the sections name runs as the merged tables do
            source.merged = True
    with ExitStack() as stack:
        exported: Exported | Future[Exported] | None = None
        if export and apart is not None:
            exported = stack.enter_context(exporting_apart(apart, out.parent / EXPORT_DIR))
        elif export:
            prefixed = len(sources) > 1
            ranges, tables = ranges_of(sources, prefixed), op_tables(sources, prefixed)
            exported = export_results(results, out.parent / EXPORT_DIR, ranges, tables, OP_STEPS)
        found = [steps_found(s) for s in sources]  # foreign runs' step rules, once for both
        splits = split_sections(sources, found)
        shown = summary.without_workers(results, splits)
        page = render_report(
            shown, title, n_boot, exported, table, kernel_sections(sources), splits,
            found_sections(sources, found),
            forecast_sections(sources, found, set(shown.runs["run_id"])), depth1,
        )  # fmt: skip
    return write_atomic(out, page)


def _links(exported: Exported | Future[Exported] | None) -> list[dict]:
    if isinstance(exported, Future):
        exported = exported.result()
    if exported is None:
        return []
    links = [
        dict(
            href=f"{EXPORT_DIR}/{TRACE_FILE}",
            what="Chrome/Perfetto trace",
            how="open in ui.perfetto.dev or chrome://tracing; host phases and device spans per step"
            + ("" if exported.every_step else " (host phases of the steps results.json keeps)")
            + (
                f"; kernels, copies and CUDA calls of {op_scope(exported.op_steps)} "
                "(`bubblelab export --all-ops` for every one)"
                if exported.op_steps
                else ""
            ),
        )
    ]
    links += [
        dict(href=f"{EXPORT_DIR}/{p.name}", what=p.name, how="Parquet table")
        for p in exported.tables
    ]
    return links
