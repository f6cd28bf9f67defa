"""`bubblelab run-and-profile`: the sweep under nsys (or the in-process timeline), then the
report."""

from __future__ import annotations

import math
import time
from pathlib import Path

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from ..core.errors import BubblelabError
from . import clock, options
from .output import SCHEMA, check_json_dest, console_for, emit_json, records
from .tables import show


def register(app: typer.Typer) -> None:
    app.command("run-and-profile")(run_and_profile)


def run_and_profile(
    ctx: typer.Context,
    model: str | None = options.MODEL,
    device: str = options.DEVICE,
    dtype: str | None = options.DTYPE,
    depth: str = typer.Option(
        "1,2", help="Pipeline depths, run back to back: a number or a comma-separated list."
    ),
    tensor_parallel: int = typer.Option(1, help="GPUs (processes) the model is split over."),
    streams: str = options.STREAMS,
    output_len_mean: float = options.OUTPUT_LEN_MEAN,
    requests_per_stream: int | None = typer.Option(
        None, help="Requests per stream in each run (default: enough for ~400 decode steps)."
    ),
    prompt_len: int = options.PROMPT_LEN,
    repeats: int = typer.Option(
        20,
        help="Unprofiled repeat pairs per configuration at most (depth 1 and 2 on the same "
        "requests, ABBA); fewer once the speedup is known to ±1 point. nsys runs one.",
    ),
    min_repeats: int = typer.Option(
        3, help="...and at least (with one depth: the runs made, 6 at least, within --repeats)."
    ),
    budget_s: float = typer.Option(
        30.0, help="Seconds of runs per configuration before it stops, known or not."
    ),
    out_of_reach: bool = typer.Option(
        True,
        "--stop-out-of-reach/--spend-budget",
        metavar="",
        help="After 4 pairs, stop a configuration whose spread puts ±1 point beyond its budget.",
    ),
    processes: int | None = typer.Option(
        None,
        help="Worker processes the unprofiled pairs are spread over, one after another (each "
        "draws its own host speed; the interval covers every process). Default 2 on the GPU; "
        "the CPU runs its pairs in-process, so 1.",
        show_default=False,
    ),
    constraint: str | None = options.CONSTRAINT,
    max_model_len: int = options.MAX_MODEL_LEN,
    attention_backend: str = options.ATTENTION_BACKEND,
    out: Path | None = typer.Option(
        None, help="A new run directory (default reports/<timestamp>/)."
    ),
    resume: Path | None = typer.Option(
        None, help="Finish the sweep in this directory: run only what is missing, same options."
    ),
    force: bool = options.FORCE,
    nsys: bool | None = typer.Option(
        None,
        "--nsys/--no-nsys",
        metavar="",
        help="Force or forbid nsys (default: use it when found).",
    ),
    keep_reports: bool = typer.Option(
        False,
        "--keep-reports",
        metavar="",
        help="Keep nsys's report (every column, for the Nsight GUI and `nsys stats`) beside the "
        "exports the analysis reads: traces/pass.nsys-rep, the whole nsys pass on one GPU; one "
        "report per run under tensor parallelism.",
    ),
    nsys_depths: str | None = typer.Option(
        None,
        help="Depths the nsys pass profiles (default: every depth run). 1: the blocking run "
        "alone, which a forecast from a trace reads: half the nsys pass's runs.",
    ),
    cuda_graph_trace: str = typer.Option(
        "node",
        metavar="[node|graph]",
        help="How nsys traces CUDA graphs: node (their kernels, for the kernel view) or graph "
        "(whole replays: lighter on the host, for a prediction from the trace).",
    ),
    json_out: str | None = options.JSON,
) -> None:
    """Measure depth 1 against depth 2 over a sweep, then analyse it and write its report.

    Each configuration runs unprofiled, then under nsys when it is found. Ctrl-C keeps every
    finished run: --resume DIR runs the rest."""
    from ..runs.state import read_state
    from ..runs.sweep import SweepSpec, sweep_spec

    dest = check_json_dest(json_out)
    if keep_reports and nsys is False:
        raise BubblelabError("--keep-reports keeps nsys's reports: leave out --no-nsys")
    if resume is not None:
        if given := [name for name in _sweep_options(ctx) if _given(ctx, name)]:
            raise BubblelabError(
                f"--resume takes the sweep's options from {resume}; leave out "
                + ", ".join("--" + g.replace("_", "-") for g in given)
            )
        state = read_state(resume)
        if state is None:
            raise BubblelabError(f"{resume} holds no sweep to resume")
        if keep_reports and state.get("profiler") != "nsys":
            raise BubblelabError(f"--keep-reports keeps nsys's reports: {resume} ran without nsys")
        spec = SweepSpec(**state["spec"])
        out = resume
    else:
        spec = sweep_spec(
            depth,
            streams,
            model=model,
            device=device,
            dtype=dtype,
            tensor_parallel=tensor_parallel,
            output_len_mean=output_len_mean,
            requests_per_stream=requests_per_stream,
            prompt_len=prompt_len,
            repeats=repeats,
            min_repeats=min_repeats,
            budget_s=budget_s,
            out_of_reach=out_of_reach,
            processes=processes,
            constraint=constraint,
            constrained_share=1.0 if constraint else 0.0,
            max_model_len=max_model_len,
            attention_backend=attention_backend,
            cuda_graph_trace=cuda_graph_trace,
            nsys_depths=nsys_depths,
        )
        out = out or Path("reports") / time.strftime("%Y%m%d-%H%M%S")
    profile_and_report(
        spec,
        out,
        nsys=nsys,
        resume=resume is not None,
        force=force,
        dest=dest,
        keep_reports=keep_reports,
    )


def _sweep_options(ctx: typer.Context) -> list[str]:
    how = ("resume", "nsys", "json_out", "keep_reports")  # not the sweep's options: how to run it
    return [str(p.name) for p in ctx.command.params if p.name not in how]


def _given(ctx: typer.Context, name: str) -> bool:
    """Typed on the command line (not left at its default)."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name != "DEFAULT"


def profile_and_report(
    spec,
    out: Path,
    *,
    nsys: bool | None = None,
    resume: bool = False,
    force: bool = False,
    dest: str | None = None,
    head: dict | None = None,
    keep_reports: bool = False,
) -> Path:
    """The sweep with a progress bar, then the report and the prediction tables; with dest, the
    JSON document (head's keys first: the demo's chat). keep_reports: the .nsys-rep files stay."""
    from ..costmodel.forecast import unchecked_forecast
    from ..costmodel.headline import noise_lines
    from ..costmodel.perturbation import profiler_perturbation
    from ..costmodel.power import power_limit_w
    from ..costmodel.predict import predict_runs
    from ..costmodel.spread import source_lines
    from ..profiling.nsys import find_nsys
    from ..report.report import report_run_dir
    from ..runs.rundir import read_results
    from ..runs.state import check_new_run_dir, check_unlocked, record_timing, time_line
    from ..runs.sweep import run_sweep
    from .predict import depth1_forecast, show_depth1, unpaired
    from .predict_tables import prediction_tables

    # Refused before the progress bar shows: a folder in use or unwritable, nsys forced but absent.
    if resume:
        check_unlocked(out)
    else:
        check_new_run_dir(out, force=force)
    if nsys:
        find_nsys()
    console = console_for(dest)
    before = _made(out)
    startup = clock.elapsed()  # the interpreter, the imports, the checks: before any run
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    ) as bar:
        task = bar.add_task("runs", total=None)  # the total once run_sweep knows if nsys runs

        def on_plan(total: int, done: int) -> None:
            bar.update(task, total=total, completed=done)

        def on_run(tag: str, s: dict) -> None:
            bar.console.print(
                f"{tag}: {s['tokens_per_s']:.1f} tokens/s, decode step {s['step_ms_median']:.3f} ms"
            )
            bar.advance(task)

        run_sweep(
            spec,
            out,
            use_nsys=nsys,
            resume=resume,
            force=force,
            on_run=on_run,
            say=lambda line: bar.console.print(Text(line), soft_wrap=True),  # paths: never markup
            on_plan=on_plan,
            keep_reports=keep_reports,
        )
    results = read_results(out)
    # once: page and console
    limit = power_limit_w(results.provenance)
    table = predict_runs(
        results.runs, results.steps, results.requests, ranks=results.ranks, power_limit_w=limit
    )
    # nothing paired: what runs at depth 1 alone foresee of depth 2
    depth1 = None if len(table) else unchecked_forecast(
        results.runs, results.steps, results.requests, results.ranks, power_limit_w=limit
    )  # fmt: skip
    record_timing(out, "startup", startup)
    with console.status("writing the report"):
        reporting = time.perf_counter()
        report = report_run_dir(out, table=table, depth1=depth1)
        timings = record_timing(out, "report", time.perf_counter() - reporting)
    forecast = None
    if len(table):
        for printed in prediction_tables(table):
            show(console, printed)
        # plainly, where the demo's CPU is too noisy to tell, and whose noise it is
        for line in [*noise_lines(table), *source_lines(table, results.steps)]:
            console.print(line, markup=False)
    elif (forecast := depth1_forecast(console, results, table=depth1)) is not None:
        show_depth1(console, [out], results.runs, forecast)
    else:
        console.print(unpaired([out], results.runs), markup=False)
    perturbation = profiler_perturbation(results.runs, results.steps)
    if len(perturbation):
        show(console, perturbation_table(perturbation))
    spent = {**results.provenance.get("timings", {}), **timings}  # + the assembly's
    # A resumed sweep with nothing left runs and assembles nothing: an earlier call's parts are
    # not this call's time.
    ran, assembled = (now != then for now, then in zip(_made(out), before, strict=True))
    spent = {k: v for k, v in spent.items() if {"passes": ran, "assemble": assembled}.get(k, True)}
    # one unwrapped line, so that a log can be searched for it
    console.print(time_line(spent, clock.elapsed()), markup=False, soft_wrap=True)
    console.print(Text(f"report: {report}"), soft_wrap=True)  # last: scripts read it
    written = emit_json(
        dest,
        {
            "schema": SCHEMA,
            **(head or {}),
            "run_dir": str(out),
            "report": str(report),
            "prediction": records(table),
            "forecast": records(forecast) if forecast is not None else [],  # depth 1 alone
            "perturbation": records(perturbation),
        },
    )
    if written is not None:
        console.print(Text(f"wrote {written}"), soft_wrap=True)
    return report


def _made(out: Path) -> tuple[object, int | None]:
    """What a call of the sweep changes when it runs and when it assembles: the passes' wall in
    runs/timings.json (run_sweep writes it only when a pass ran) and the results file."""
    from ..runs.rundir import results_path
    from ..runs.state import read_json

    timings = out / "runs" / "timings.json"
    results = results_path(out) if out.is_dir() else None
    return (read_json(timings).get("passes") if timings.is_file() else None,
            results.stat().st_mtime_ns if results else None)  # fmt: skip


def perturbation_table(table) -> Table:
    """What nsys did to each phase's steady-state median (ms, unprofiled → under nsys)."""
    out = Table(
        title="Under nsys: steady-state medians, unprofiled → profiled",
        title_justify="left",
        header_style="bold",
    )
    parts = ("period", "forward", "sampling", "bubble", "host_tick", "launch", "commit")
    for name in ("configuration", "depth", *parts, "speedup"):
        out.add_column(name, justify="left" if name == "configuration" else "right", no_wrap=True)
    for r in table.to_dict("records"):
        cells = [f"{r[f'{p}_plain']:.3f} → {r[f'{p}_nsys']:.3f} ({100 * r[f'{p}_inflation']:+.0f}%)"
                 if r.get(f"{p}_plain") else "–" for p in parts]  # fmt: skip
        plain, nsys = r.get("speedup_plain_pct", math.nan), r.get("speedup_nsys_pct", math.nan)
        speedup = "–" if math.isnan(plain) else f"{plain:+.1f}% → {nsys:+.1f}%"
        out.add_row(r["label"], str(r["depth"]), *cells, speedup)
    return out
