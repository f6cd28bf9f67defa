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

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from . import options as shared
from .output import SCHEMA, cell, check_json_dest, console_for, emit_and_say
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
        help="Foreign runs: mean generated length L, for the zombie tax (default: decode steps + "
        "1).",
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
    from ..core.errors import OptionError
    from ..core.steady import WARMUP_STEPS
    from ..profiling.steps import StepOptions
    from ..runs.analysis import analyze_traces
    from ..runs.workload import WorkloadSpec
    from .kernels import kernel_tables
    from .ranks import LEGEND, rank_lines, rank_table

    dest = check_json_dest(json_out)
    console = console_for(dest)  # people's output: stdout (stderr under --json -)
    workload = None
    if streams is not None:
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
    show(console, _found_table(report["runs"]))
    for line in _doubts(report["runs"]):
        console.print(line)
    show(console, _steps_table(report["runs"]))
    show(console, _attribution_table(report["runs"]), drop_empty=True)
    for tp in report["tensor_parallel"]:
        show(console, rank_table(tp, tp["name"]))
        for note in rank_lines(tp):
            console.print(note, markup=False)
    if report["tensor_parallel"]:
        console.print(LEGEND, markup=False)
    names = {r["run_id"]: r["name"] for r in report["runs"]}
    sure = {r["run_id"]: r["steps_found"]["confidence"] == "high" for r in report["runs"]}
    for split in report.get("split_engines", []):
        console.print(_split_line(split, names), markup=False)
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
            console.print(table)
    for run in report["runs"]:
        if "syncs_per_step" in run:
            _print_foreign(console, run)
        elif run["flagged_syncs"]:
            line = Text("run ", style="red") + cell(run["name"])
            line.append(
                f": {run['flagged_syncs']} syncs or copies stall the pipeline "
                "(see profiling.analysis.sync_inventory)"
            )
            line.stylize("red")
            console.print(line)


def _found_table(runs: list[dict]) -> Table:
    table = Table(title="Steps found", title_justify="left", header_style="bold")
    for column in (
        "run",
        "rule",
        "steps",
        "decode",
        "prefill-like",
        "period CV",
        "GPU covered",
        "sure",
    ):
        table.add_column(column, justify="left" if column in ("run", "rule", "sure") else "right")
    for run in runs:
        found = run["steps_found"]
        table.add_row(
            cell(run["name"]),
            found["rule"],
            str(found["steps"]),
            str(found["decode_steps"]),
            str(found["prefill_steps"]),
            "–" if found["period_cv"] is None else f"{found['period_cv']:.3f}",
            _percent(found["gpu_coverage"]),
            found["confidence"],
        )
    table.caption = Text("\n").join(
        cell(f"{r['name']}: {r['steps_found']['detail']}", limit=200)
        + (
            cell(f"; sure: {r['steps_found']['evidence']}", limit=200)
            if r["steps_found"].get("evidence") and r["steps_found"]["sure"]
            else Text()
        )
        for r in runs
    )
    table.caption_justify = "left"
    return table


def _doubts(runs: list[dict]) -> list[Text]:
    """One red line per run whose steps are not sure (its figures are marked ~), and one per kind
    of row the value checks dropped or counted."""
    lines = []
    for run in runs:
        found = run["steps_found"]
        if not found["sure"] and run["steps"]:
            line = cell(f"run {run['name']}: {found['unsure']}; its figures are marked ~", 400)
            line.stylize("red")
            lines.append(line)
        for check in found["checks"]:
            line = cell(f"run {run['name']}: {check}", 300)
            line.stylize("red")
            lines.append(line)
    return lines


def _median(stat: dict) -> str:
    return "–" if stat["median"] is None else f"{stat['median']:.3f}"


def _steps_table(runs: list[dict]) -> Table:
    table = Table(
        title="Steady-state steps, median ms (--json adds p10/p90)",
        title_justify="left",
        header_style="bold",
        caption_justify="left",
    )
    for column in (
        "run",
        "depth",
        "streams",
        "steps",
        "forward",
        "sampling",
        "bubble",
        "kernel gap",
        "period",
        "bubble%",
        "host-late%",
    ):
        table.add_column(column, justify="left" if column == "run" else "right", no_wrap=True)
    for run in runs:
        mark = "" if run["steps_found"]["sure"] else "~"  # not sure of the steps (line above)
        table.add_row(
            cell(run["name"]),
            _dash(run["depth"]),
            _dash(run["streams"]),
            *(
                value if value == "–" else mark + value
                for value in (
                    str(run["steps"]),
                    *(
                        _median(run[f"{c}_ms"])
                        for c in ("forward", "sampling", "bubble", "kernel_gap", "period")
                    ),
                    _percent(run["bubble_share"]),
                    _percent(run["host_late_share"]),
                )
            ),
        )
    unsure = not all(run["steps_found"]["sure"] for run in runs)
    table.caption = (
        ("~: the steps are not sure (the red line above says why and how to settle it)\n" * unsure)
        + "forward, sampling: GPU spans; bubble: period outside them; kernel gap: idle inside "
        "them\nforeign runs: forward = period - bubble; bubble / kernel gap: idle gaps above / "
        "below --gap-threshold-us\n"
        "host-late%: share of the bubble in gaps that ended only when the host launched work"
    )
    return table


def _dash(value: object) -> str:
    return "–" if value is None else str(value)


def _percent(share: float | None) -> str:
    return "–" if share is None else f"{100 * share:.1f}"


def _attribution_table(runs: list[dict]) -> Table:
    """Top-level parts down, runs across: the bubble per steady step by what the host was doing
    during it (time, the headline: what you would have to make faster) and by the part of the loop
    the host was in when each idle gap began (began)."""
    splits = (("time", "time"), ("began", "began"))
    parts = list(
        dict.fromkeys(
            p
            for run in runs
            for key, _ in splits
            for p in run["attribution_ms_per_step"][key]["top_level"]
        )
    )
    table = Table(
        title="Bubble ms per steady step, by the part of the loop the host was in",
        title_justify="left",
        header_style="bold",
        caption_justify="left",
    )
    table.add_column("host part", no_wrap=True)
    for run in runs:
        for _, label in splits:
            header = cell(run["name"])
            header.append(f"\n{label}")
            table.add_column(header, justify="right", no_wrap=True)
    for part in parts:
        table.add_row(
            cell(part),
            *(
                _ms(run["attribution_ms_per_step"][key]["top_level"].get(part))
                for run in runs
                for key, _ in splits
            ),
        )
    table.caption = "time: while the host was in it (the headline)\nbegan: gaps that began in it"
    return table


def _split_line(split: dict, names: dict[str, str]) -> str:
    """Another engine's trace of several processes, each on its own GPU running collectives."""
    runs = ", ".join(names.get(r, r) for r in split["run_ids"])
    matched = ", ".join(f"{m} of {n}" for m, n in split["matched_steps"])
    return (
        f"{runs}: {len(split['run_ids'])} processes of one trace, each on its own GPU and "
        f"launching collectives: most likely one engine split over {split['gpus']} GPUs, ranked "
        f"by GPU. Each is also a run of its own. Its ranks side by side below: each rank's steps "
        f"matched to rank 0's by the GPU time they share ({matched} steps matched), the GPU "
        "span standing for the forward; host phases unknown (docs/tensor-parallel.md)"
    )


def _print_foreign(console: Console, run: dict) -> None:
    """A foreign run's idle split, host syncs per step, what its host did in the bubble, and the
    gain."""
    rid, split = cell(run["name"]).plain, run["idle_split"]
    if split:
        console.print(
            f"run {rid}: idle {split['idle_ms_per_step']:.3f} ms a steady step: "
            f"{_percent(split['longest_bubble_share'])}% in its longest bubble, "
            f"{_percent(split['other_bubbles_share'])}% in other bubbles, "
            f"{_percent(split['kernel_gaps_share'])}% in gaps between kernels",
            markup=False,
        )
    split = run["attribution_ms_per_step"]
    if split["time"]["phase"]:
        table = Table(
            title=Text(f"run {rid}: bubble ms per step by what the host was doing"),
            title_justify="left",
        )
        table.add_column("host activity")
        table.add_column("time", justify="right")
        table.add_column("began", justify="right")
        for phase, ms in list(split["time"]["phase"].items())[:8]:
            table.add_row(cell(phase), _ms(ms), _ms(split["began"]["phase"].get(phase)))
        show(console, table)
    if run["syncs_per_step"]:
        table = Table(title=Text(f"run {rid}: host syncs per steady step"), title_justify="left")
        for column in (
            "per step",
            "event",
            "API",
            "detail",
            "closes step",
            "after kernel",
            "NVTX range",
        ):
            table.add_column(column, justify="right" if column == "per step" else "left")
        for row in run["syncs_per_step"]:
            table.add_row(
                f"{row['per_step']:.3g}",
                cell(row["event"]),
                cell(row["api"]),
                cell(row["detail"]),
                "yes" if row["closing"] else Text("no: extra", style="red"),
                cell(row["after"]),
                cell(row["phase"]),
            )
        show(console, table)
    gain = run.get("pipelining", {})
    if "speedup_pct" in gain:
        lo, hi = gain["interval_pct"]
        mark = ""
        if (
            "graph_launch_ms" in gain
        ):  # nsys slowed every graph launch: the profiled engine's number
            mark = "upper bound" if gain["bound"] == "upper" else "not sure"
            mark += f" (the profiled engine's: graphs traced {gain['graph_trace']}-level): "
        console.print(
            f"run {rid}: {mark}pipelining would buy {gain['speedup_pct']:+.1f}% "
            f"(95% interval {lo:+.1f}% .. {hi:+.1f}%), assuming:",
            markup=False,
        )
        for line in gain["assumptions"]:
            console.print(Text("  - ") + cell(line, limit=300))
        whole = gain["whole_run"]
        wlo, whi = whole["interval_pct"]
        console.print(
            f"run {rid}: over the whole trace, {mark}pipelining would buy "
            f"{whole['speedup_pct']:+.1f}% (95% interval {wlo:+.1f}% .. {whi:+.1f}%): the figure "
            "to set beside a measured wall clock.",
            markup=False,
        )
        console.print(Text("  - ") + cell(whole["line"], limit=900))
    elif gain:
        console.print(cell(f"run {rid}: no pipelining prediction ({gain['not_predicted']})", 300))


def _ms(ms: float | None) -> str:
    return "–" if ms is None else f"{ms:.3f}"
