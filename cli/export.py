"""`bubblelab export`: a run directory or a trace as a Chrome/Perfetto trace and Parquet tables."""

from __future__ import annotations

from pathlib import Path

import typer

from . import options
from .output import SCHEMA, STDOUT, check_json_dest, emit_json


def register(app: typer.Typer) -> None:
    app.command("export")(export)


def export(
    source: Path = typer.Argument(
        ...,
        metavar="SOURCE",
        help="A run directory (results.json) or an nsys SQLite export (.sqlite, .sqlite.gz).",
    ),
    out: Path | None = typer.Option(
        None, "--out", help="Folder to write into (default: SOURCE/export, or NAME-export here)."
    ),
    all_ops: bool = typer.Option(
        False,
        "--all-ops",
        metavar="",
        help="Kernels, copies and CUDA calls of every step (default: the middle 128 steps of each "
        "run; a sweep's million kernels make a trace ui.perfetto.dev opens slowly).",
    ),
    json_out: str | None = options.JSON,
) -> None:
    """Write a run directory or a trace as a Perfetto trace and Parquet tables.

    trace.json.gz opens in ui.perfetto.dev or chrome://tracing (host phases and device spans per
    step; kernels, copies and CUDA calls of the middle steps of each run); runs, steps, gaps and
    attribution are written as Parquet."""
    from rich.console import Console
    from rich.text import Text

    from ..core.files import check_output_dir
    from ..report.export import OP_STEPS, default_out_dir, op_scope
    from ..report.export import export as export_source

    dest = check_json_dest(json_out)
    out_dir = check_output_dir(out or default_out_dir(source), "--out")
    with Console(stderr=True).status(Text(f"exporting {source}")):
        exported = export_source(source, out_dir, op_steps=None if all_ops else OP_STEPS)
    for path in (exported.trace, *exported.tables):
        typer.echo(path, err=dest == STDOUT)
    if not exported.every_step:
        typer.echo(
            "host phases cover the steps results.json keeps (no catalog.duckdb beside it)",
            err=True,
        )
    if exported.op_steps:
        typer.echo(
            f"kernels, copies and CUDA calls of {op_scope(exported.op_steps)} "
            "(--all-ops: every one)",
            err=True,
        )
    doc = {
        "schema": SCHEMA,
        "trace": str(exported.trace),
        "tables": [str(t) for t in exported.tables],
        "every_step": exported.every_step,
        "op_steps": exported.op_steps,
    }
    if (written := emit_json(dest, doc)) is not None:
        typer.echo(f"wrote {written}", err=True)
