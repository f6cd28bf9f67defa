"""`bubblelab analyze`: print the per-run bubble breakdown of nsys traces (the work is
bubblelab.runs.analysis.analyze_traces; --json writes its answer as is).

Any nsys export: bubblelab's own traces by their NVTX ranges, others by the steps profiling/steps.py
finds (--step-range, --step-rule); or a run directory, from the catalog run-and-profile left in it.
A tensor-parallel run (a run directory's rank timelines, or one export of every rank's process)
adds a table of its ranks (bubblelab.cli.ranks). Trace-derived text (range, kernel and API names) is
data, never rich markup: it reaches the console through output.cell, escaped, on one line. Runs are
named by configuration (`qwen3-0.6b·s8·d2·r0`, a worker `…·r0·rank1`). With --catalog the catalog is
updated whole or not at all.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import typer
from rich.text import Text

from . import options as shared
from .output import SCHEMA, cell, check_json_dest, console_for, emit_and_say
from .run_tables import (
    attribution_table,
    doubts,
    found_table,
    print_foreign,
    split_line,
    steps_table,
)
from .tables import show


def register(app: typer.Typer) -> None:
    app.command("analyze")(analyze)


def analyze(
    traces: list[Path] = typer.Argument(
        None,
        metavar="TRACES",
        help="nsys exports: .sqlite, .sqlite.gz or .nsys-rep (none: every run already in "
        "--catalog); or one run directory of run-and-profile.",
    ),
    catalog: Path = typer.Option(
        None, "--catalog", help="DuckDB catalog to add the runs to (default: in memory)."
    ),
    json_out: str | None = shared.JSON,
    warmup: int = typer.Option(
        None, help="Steady-state candidates skipped at the start of each run (default 5)."
    ),
    domain: str = typer.Option("bubblelab", help="NVTX domain of bubblelab's ranges."),
    step_range: str = typer.Option(
        None,
        "--step-range",
        help="Regex (RE2, searched) naming the NVTX range around one step of a foreign engine.",
    ),
    step_rule: str = typer.Option(
        "auto",
        "--step-rule",
        help="Without bubblelab ranges or --step-range: auto (every rule tried, the evidence "
        "picks), sync (the host sync closing each step), graph (one CUDA-graph replay a step) or "
        "pause (the host's pause before each step's first launch).",
    ),
    gap_threshold_us: float = typer.Option(
        5.0, "--gap-threshold-us", help="Foreign runs: GPU idle shorter than this is a kernel gap."
    ),
    output_len_mean: float = typer.Option(
        None,
        help="Foreign runs: mean generated length L, for the zombie tax (default: an index.json "
        "beside the trace, else the trace's decode steps + 1, said to be a guess where requests "
        "joined mid-run).",
    ),
    step_ms: float = typer.Option(
        None,
        "--step-ms",
        help="One foreign run: the engine's own time a decode step without the profiler (its "
        "inter-token latency at this batch). It replaces the traced step time in the prediction: "
        "nsys slows the host (docs/foreign-traces.md).",
    ),
    mean_step_ms: float = typer.Option(
        None,
        "--mean-step-ms",
        help="One foreign run: the engine's own time a step without the profiler, averaged over a "
        "whole run of this workload (its wall clock over its steps): the whole-run figure takes "
        "the traced mean period's excess over it as the profiler's.",
    ),
    streams: int = typer.Option(
        None,
        "--streams",
        help="One foreign run's workload, a closed loop of this many requests in flight (with "
        "--requests-per-stream, --prompt-len and --output-len-mean, lengths uniform on [L/2, "
        "3L/2]): the whole-run figure replays it to count the steps depth 2 adds.",
    ),
    requests_per_stream: int = typer.Option(
        4, "--requests-per-stream", help="With --streams: requests per stream."
    ),
    prompt_len: int = shared.PROMPT_LEN,
    zombies: bool = typer.Option(
        True,
        "--zombies/--no-zombies",
        metavar="",
        help="Foreign runs: --no-zombies where every request stops at a length the engine knows "
        "when it launches a step (max_tokens with ignore_eos) and it launches none past it: no "
        "zombie tax (z = 0).",
    ),
    kernels: bool = typer.Option(
        False,
        "--kernels",
        metavar="",
        help="Add the kernel-level view: top kernels, CUDA API summary, launch latency, and the "
        "whole run split into compute, copies and idle time.",
    ),
) -> None:
    """Break each traced run down step by step: forward, bubble, period and where the bubble went.

    Also the steps found, and for a foreign engine its host syncs and what pipelining would buy
    it."""
    from ..core.checks import check_int
    from ..core.errors import OptionError
    from ..core.steady import WARMUP_STEPS
    from ..profiling.steps import StepOptions
    from ..runs.analysis import analyze_traces
    from .kernels import kernel_tables
    from .ranks import LEGEND, rank_lines, rank_table

    dest = check_json_dest(json_out)
    console = console_for(dest)  # people's output: stdout (stderr under --json -)
    workload = None
    if streams is not None:
        from ..runs.workload import MAX_STREAMS, WorkloadSpec  # the engine's config: torch

        check_int("streams", streams, 1, MAX_STREAMS)  # a bad count first, then what it needs
        if output_len_mean is None:
            raise OptionError("streams", "needs --output-len-mean, the workload's L", streams)
        requests = requests_per_stream * streams
        workload = WorkloadSpec(streams, requests, output_len_mean, prompt_len=prompt_len)
    with console.status("") as status:
        report = analyze_traces(
            traces or (),
            catalog=catalog,
            warmup=WARMUP_STEPS if warmup is None else warmup,
            domain=domain,
            steps=StepOptions(step_range, step_rule, gap_threshold_us),
            output_len=output_len_mean,
            step_ms=step_ms,
            zombies=zombies,
            mean_step_ms=mean_step_ms,
            workload=workload,
            kernels=kernels,
            on_progress=lambda what: status.update(Text(what)),
        )
    if emit_and_say(console, dest, {"schema": SCHEMA, **report}):
        return
    show(console, found_table(report["runs"]))
    for line in doubts(report["runs"]):
        console.print(line)
    show(console, steps_table(report["runs"]))
    show(console, attribution_table(report["runs"]), drop_empty=True)
    for tp in report["tensor_parallel"]:
        show(console, rank_table(tp, tp["name"]))
        for note in rank_lines(tp):
            console.print(note, markup=False)
    if report["tensor_parallel"]:
        console.print(LEGEND, markup=False)
    names = {r["run_id"]: r["name"] for r in report["runs"]}
    sure = {r["run_id"]: r["steps_found"]["confidence"] == "high" for r in report["runs"]}
    for split in report.get("split_engines", []):
        console.print(split_line(split, names), markup=False)
        each_sure = all(sure.get(r, False) for r in split["run_ids"])
        if split.get("sure") and not each_sure:
            console.print(f"  sure together: {split['evidence']}", markup=False)
        elif not each_sure:
            console.print(
                "  the steps of these ranks are not sure (their runs above say why): the table "
                "below stands on them, read its figures as ~",
                style="red",
            )
        if split["ranks"] is not None:
            name = names.get(split["run_ids"][0], split["run_ids"][0])
            show(console, rank_table(split["ranks"], name, "by the GPU time they share"))
            if split.get("cross_rank_timing"):
                console.print(f"  {split['cross_rank_timing']}", markup=False)
            else:
                for note in rank_lines(split["ranks"]):
                    console.print(note, markup=False)
    for run in report["runs"] if kernels else ():
        for table in kernel_tables(run):
            show(console, table)
    for run in report["runs"]:
        if "syncs_per_step" in run:
            print_foreign(console, run)
        elif run["flagged_syncs"]:
            line = Text("run ", style="red") + cell(run["name"])
            line.append(
                f": {run['flagged_syncs']} syncs or copies stall the pipeline "
                "(see profiling.analysis.sync_inventory)"
            )
            line.stylize("red")
            console.print(line)
    hint = forecast_hint(report["runs"], traces or [])
    if hint is not None:
        console.print(hint)


def forecast_hint(runs: list[dict], given: list[Path]) -> Text | None:
    """Where blocking runs of our own engine get their forecast: a run directory's from predict,
    a lone trace's from its foreign reading (ours are read by their NVTX phases, which forecast
    nothing)."""
    blocking = [r for r in runs if "syncs_per_step" not in r and r["depth"] == 1]
    if blocking and len(given) == 1 and given[0].is_dir():  # predict replays their requests
        both = any(r["depth"] == 2 for r in runs)
        return Text.assemble(
            "What pipelining would buy these depth-1 runs, "
            f"{'beside what depth 2 measured' if both else 'from them alone'}: bubblelab predict ",
            cell(shlex.quote(str(given[0])), limit=1000),
        )
    traced = [r for r in blocking if r["trace_path"]]  # a catalog's in-process runs have none
    if len(traced) > 1:
        return Text.assemble(
            "runs ",
            Text(", ").join(cell(r["name"]) for r in traced),
            " are blocking (depth 1). What pipelining would buy each, from its trace alone: "
            "bubblelab analyze TRACE --domain none",
        )
    if not traced:
        return None
    trace = Path(traced[0]["trace_path"])
    if trace.is_relative_to(Path.cwd()):
        trace = trace.relative_to(Path.cwd())
    return Text.assemble(
        "run ",
        cell(traced[0]["name"]),
        " is blocking (depth 1). What pipelining would buy it, from this trace alone: bubblelab "
        "analyze ",
        cell(shlex.quote(str(trace)), limit=1000),
        " --domain none",
    )
