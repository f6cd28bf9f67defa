"""`bubblelab analyze`: ingest nsys traces into a catalog and print the per-run bubble breakdown.

Any nsys export: bubblelab's own traces by their NVTX ranges, others by the steps profiling/steps.py
finds (--step-range, --step-rule). Trace-derived text (range, kernel and API names) is data, never
rich markup: it reaches the console as rich Text.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

console = Console(width=None if sys.stdout.isatty() else 120)  # piped output: no squeezed columns


def register(app: typer.Typer) -> None:
    app.command("analyze")(analyze)


def analyze(
    traces: list[Path] = typer.Argument(
        None,
        help="nsys exports: .sqlite, .sqlite.gz or .nsys-rep (none: every run already in "
        "--catalog).",
    ),
    catalog: Path = typer.Option(
        None, "--catalog", help="DuckDB catalog to add the runs to (default: in memory)."
    ),
    as_json: bool = typer.Option(
        False, "--json", help="Print medians and p10/p90 per run (and per depth, streams) as JSON."
    ),
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
        help="Without bubblelab ranges or --step-range: auto, sync (the host sync closing each "
        "step) "
        "or graph (one CUDA-graph replay a step).",
    ),
    gap_threshold_us: float = typer.Option(
        5.0, "--gap-threshold-us", help="Foreign runs: GPU idle shorter than this is a kernel gap."
    ),
    output_len: float = typer.Option(
        None,
        "--output-len",
        help="Foreign runs: tokens a request generates, for the zombie tax (default: decode steps "
        "+ 1).",
    ),
) -> None:
    """Per-step breakdown of each run: steps found, forward, bubble and period, where the bubble
    went, and for a foreign engine its host syncs and what pipelining would buy it."""
    from bubblelab.costmodel.foreign import pipelining_gain
    from bubblelab.errors import BubblelabError
    from bubblelab.profiling import analysis
    from bubblelab.profiling.catalog import connect
    from bubblelab.profiling.ingest import ingest_trace
    from bubblelab.profiling.steps import StepOptions

    if not traces and catalog is None:
        raise BubblelabError("give one or more traces, or --catalog PATH")
    options = StepOptions(step_range, step_rule, gap_threshold_us)
    con = connect(catalog)
    run_ids = (
        [
            r
            for trace in traces
            for r in ingest_trace(trace, None, {}, domain=domain, steps=options, con=con)
        ]
        if traces
        else None
    )
    warmup = analysis.WARMUP_STEPS if warmup is None else warmup
    report = analysis.analyze(con, run_ids, warmup)
    for run in report["runs"]:
        if "syncs_per_step" in run:
            try:
                run["pipelining"] = pipelining_gain(
                    analysis.per_step(con, run["run_id"]),
                    output_len=output_len,
                    extra_syncs=_extra_syncs(run),
                    warmup=warmup,
                )
            except BubblelabError as e:
                run["pipelining"] = {"not_predicted": str(e)}
    if as_json:
        print(json.dumps(report, indent=1))
        return
    console.print(_found_table(report["runs"]))
    console.print(_steps_table(report["runs"]))
    console.print(_attribution_table(report["runs"]))
    for run in report["runs"]:
        if "syncs_per_step" in run:
            _print_foreign(run)
        elif run["flagged_syncs"]:
            console.print(
                f"[red]run {run['run_id'][:8]}: {run['flagged_syncs']} syncs or copies stall the "
                "pipeline (see profiling.analysis.sync_inventory)[/red]"
            )


def _extra_syncs(run: dict) -> str | None:
    """The run's mid-step host syncs in words, e.g. '128 x cudaStreamSynchronize_v3020 a step'."""
    extra = [r for r in run["syncs_per_step"] if r["flagged"] and r["event"] == "sync"]
    return "; ".join(f"{r['per_step']:.3g} x {r['api']} a step" for r in extra) or None


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
            run["run_id"][:8],
            found["rule"],
            str(found["steps"]),
            str(found["decode_steps"]),
            str(found["prefill_steps"]),
            "–" if found["period_cv"] is None else f"{found['period_cv']:.3f}",
            _percent(found["gpu_coverage"]),
            found["confidence"],
        )
    details = [f"{r['run_id'][:8]}: {r['steps_found']['detail']}" for r in runs]
    table.caption = Text("\n".join(details))
    table.caption_justify = "left"
    return table


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
        table.add_row(
            run["run_id"][:8],
            _dash(run["depth"]),
            _dash(run["streams"]),
            str(run["steps"]),
            *(
                _median(run[f"{c}_ms"])
                for c in ("forward", "sampling", "bubble", "kernel_gap", "period")
            ),
            _percent(run["bubble_share"]),
            _percent(run["host_late_share"]),
        )
    table.caption = (
        "forward, sampling: GPU spans; bubble: period outside them; kernel gap: idle inside them\n"
        "foreign runs: forward = period - bubble; bubble / kernel gap: idle gaps above / below "
        "--gap-threshold-us\n"
        "host-late%: share of the bubble in gaps that ended only when the host launched work"
    )
    return table


def _dash(value: object) -> str:
    return "–" if value is None else str(value)


def _percent(share: float | None) -> str:
    return "–" if share is None else f"{100 * share:.1f}"


def _attribution_table(runs: list[dict]) -> Table:
    """Top-level parts down, runs across: the bubble per steady step by the part of the loop the
    host was in when each idle interval began, and time-weighted by what it was doing meanwhile."""
    rules = (("top_level", "began"), ("top_level_by_time", "by time"))
    parts = list(
        dict.fromkeys(
            p for run in runs for key, _ in rules for p in run["attribution_ms_per_step"][key]
        )
    )
    table = Table(
        title="Bubble ms per steady step, by the part of the loop the host was in",
        title_justify="left",
        header_style="bold",
    )
    table.add_column("host part", no_wrap=True)
    for run in runs:
        for _, label in rules:
            table.add_column(
                f"{run['run_id'][:4]} d{_dash(run['depth'])} {label}", justify="right", no_wrap=True
            )
    for part in parts:
        table.add_row(
            Text(part),
            *(
                _ms(run["attribution_ms_per_step"][key].get(part))
                for run in runs
                for key, _ in rules
            ),
        )
    return table


def _print_foreign(run: dict) -> None:
    """A foreign run's idle split, host syncs per step, what its host did in the bubble, and the
    gain."""
    rid, split = run["run_id"][:8], run["idle_split"]
    if split:
        console.print(
            f"run {rid}: idle {split['idle_ms_per_step']:.3f} ms a steady step: "
            f"{_percent(split['longest_bubble_share'])}% in its longest bubble, "
            f"{_percent(split['other_bubbles_share'])}% in other bubbles, "
            f"{_percent(split['kernel_gaps_share'])}% in gaps between kernels"
        )
    phases = run["attribution_ms_per_step"]["phase"]
    if phases:
        table = Table(
            title=f"run {rid}: bubble by what the host was doing when it began",
            title_justify="left",
        )
        table.add_column("host activity")
        table.add_column("ms/step", justify="right")
        for phase, ms in list(phases.items())[:8]:
            table.add_row(Text(phase), _ms(ms))
        console.print(table)
    if run["syncs_per_step"]:
        table = Table(title=f"run {rid}: host syncs per steady step", title_justify="left")
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
                row["event"],
                Text(row["api"]),
                Text(row["detail"]),
                "yes" if row["closing"] else Text("no: extra", style="red"),
                Text(str(row["after"])),
                Text(str(row["phase"])),
            )
        console.print(table)
    gain = run.get("pipelining", {})
    if "speedup_pct" in gain:
        lo, hi = gain["interval_pct"]
        console.print(
            f"run {rid}: pipelining would buy {gain['speedup_pct']:+.1f}% "
            f"(95% interval {lo:+.1f}% .. {hi:+.1f}%), assuming:"
        )
        for line in gain["assumptions"]:
            console.print(Text(f"  - {line}"))
    elif gain:
        console.print(Text(f"run {rid}: no pipelining prediction ({gain['not_predicted']})"))


def _ms(ms: float | None) -> str:
    return "–" if ms is None else f"{ms:.3f}"
