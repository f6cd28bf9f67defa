"""`bubblelab analyze`: ingest nsys traces into a catalog and print the per-run bubble breakdown."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

console = Console(width=None if sys.stdout.isatty() else 120)  # piped output: no squeezed columns


def register(app: typer.Typer) -> None:
    app.command("analyze")(analyze)


def analyze(
    traces: list[Path] = typer.Argument(
        None, help="nsys SQLite exports (none: every run already in --catalog)."
    ),
    catalog: Path = typer.Option(
        None, "--catalog", help="DuckDB catalog to add the runs to (default: in memory)."
    ),
    as_json: bool = typer.Option(
        False, "--json", help="Print medians and p10/p90 per (depth, streams) as JSON."
    ),
    warmup: int = typer.Option(
        None, help="Steady-state candidates skipped at the start of each run (default 5)."
    ),
    domain: str = typer.Option("bubblelab", help="NVTX domain of the engine's ranges."),
) -> None:
    """Per-step breakdown of each run: forward, sampling, bubble and period, and where the bubble
    went."""
    from bubblelab.errors import BubblelabError
    from bubblelab.profiling import analysis
    from bubblelab.profiling.catalog import connect
    from bubblelab.profiling.ingest import ingest

    if not traces and catalog is None:
        raise BubblelabError("give one or more traces, or --catalog PATH")
    con = connect(catalog)
    run_ids = (
        [ingest(trace, None, {}, domain=domain, con=con) for trace in traces] if traces else None
    )
    report = analysis.analyze(con, run_ids, analysis.WARMUP_STEPS if warmup is None else warmup)
    if as_json:
        print(json.dumps(report, indent=1))
        return
    console.print(_steps_table(report["runs"]))
    console.print(_attribution_table(report["runs"]))
    for run in report["runs"]:
        if run["flagged_syncs"]:
            console.print(
                f"[red]run {run['run_id'][:8]}: {run['flagged_syncs']} syncs or copies stall the "
                "pipeline (see profiling.analysis.sync_inventory)[/red]"
            )


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
            str(run["depth"]),
            str(run["streams"]),
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
        "host-late%: share of the bubble in gaps that ended only when the host launched work"
    )
    return table


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
                f"{run['run_id'][:4]} d{run['depth']} {label}", justify="right", no_wrap=True
            )
    for part in parts:
        table.add_row(
            part,
            *(
                _ms(run["attribution_ms_per_step"][key].get(part))
                for run in runs
                for key, _ in rules
            ),
        )
    return table


def _ms(ms: float | None) -> str:
    return "–" if ms is None else f"{ms:.3f}"
