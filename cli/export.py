"""`bubblelab export`: a run directory or a trace as a Chrome/Perfetto trace and Parquet tables."""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    app.command("export")(export)


def export(
    source: Path = typer.Argument(
        ..., help="A run directory (results.json) or an nsys SQLite export (.sqlite, .sqlite.gz)."
    ),
    out: Path | None = typer.Option(
        None, "--out", help="Folder to write into (default: SOURCE/export, or NAME-export here)."
    ),
) -> None:
    """Write trace.json.gz (open in ui.perfetto.dev or chrome://tracing: host phases and device
    spans per step) and runs, steps, gaps and attribution as Parquet."""
    from rich.console import Console
    from rich.text import Text

    from ..core.files import check_output_dir
    from ..report.export import default_out_dir
    from ..report.export import export as export_source

    out_dir = check_output_dir(out or default_out_dir(source), "--out")
    with Console(stderr=True).status(Text(f"exporting {source}")):
        exported = export_source(source, out_dir)
    for path in (exported.trace, *exported.tables):
        typer.echo(path)
    if not exported.every_step:
        typer.echo(
            "host phases cover the steps results.json keeps (no catalog.duckdb beside it)",
            err=True,
        )
