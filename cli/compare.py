"""`bubblelab compare A B`: two traces or two run directories side by side (report.diff)."""

from __future__ import annotations

from pathlib import Path

import typer

from . import options as shared

PHASES_SHOWN = 12  # the attribution's largest host phases in the terminal; the page and JSON: all


def register(app: typer.Typer) -> None:
    app.command("compare")(compare)


def compare(
    a: Path = typer.Argument(
        ..., metavar="A", help="A run directory (results.json) or an nsys export."
    ),
    b: Path = typer.Argument(
        ..., metavar="B", help="The run directory or nsys export to set against A."
    ),
    html: Path | None = typer.Option(None, "--html", help="Also write the comparison as a page."),
    json_out: str | None = shared.JSON,
) -> None:
    """Put two traces or run directories side by side, with B - A.

    The steady-state step, where the bubble went, and the kernels where both have a catalog."""
    from rich.table import Table
    from rich.text import Text

    from ..core.files import check_output_path, write_atomic
    from ..report.diff import (
        KEPT_GPU_WORK,
        foreseen_rows,
        percent_change,
        row_figures,
        unprofiled_words,
        z_words,
    )
    from ..report.diff import compare as compare_sources
    from ..report.diff_page import render_comparison
    from .output import SCHEMA, cell, check_json_dest, console_for, emit_json
    from .tables import show

    dest = check_json_dest(json_out)
    if html is not None:
        check_output_path(html, "--html")
    console = console_for(dest)
    with console.status(f"comparing {a} and {b}"):
        result = compare_sources(a, b)
    if written := emit_json(dest, {"schema": SCHEMA, **result.to_dict()}):
        console.print(f"wrote {written}", markup=False)
    if html is not None:
        console.print(f"wrote {write_atomic(html, render_comparison(result))}", markup=False)
    one_pair = len(result.runs) == 1  # then each side's run is said here, not in every title
    for i, (letter, name) in enumerate(zip("AB", result.names, strict=True)):
        run = f" · {result.runs[0][1 + i]}" if one_pair else ""
        console.print(Text.assemble(f"{letter}  ", cell(name, 200), run))
    for title, frame, what in (
        ("Steady-state step (medians)", result.steps, "metric"),
        ("Bubble by host phase, mean ms per steady step", result.attribution, "phase"),
        ("Kernels, GPU ms per step", result.kernels, "kernel"),
    ):
        for pair, rows in frame.groupby("pair", sort=False):
            table = Table(
                title=Text(title if one_pair else f"{title} · {pair}"), title_justify="left"
            )
            table.add_column(what, overflow="fold")
            pct = "diff_pct" in rows
            for name in ("A", "B", "B - A", *(["%"] if pct else [])):
                table.add_column(name, justify="right", no_wrap=True)
            records = rows.to_dict("records")
            if what == "phase" and len(records) > PHASES_SHOWN + 2:  # a foreign trace has dozens
                size = rows[["a", "b"]].abs().max(axis=1).fillna(0)
                size = size.sort_values(ascending=False, kind="stable")
                records = rows.loc[size.index[:PHASES_SHOWN]].to_dict("records")
                left = size.iloc[PHASES_SHOWN:]
                table.caption = (
                    f"{len(left)} more phases, none over {left.max():.3f} ms a step on either "
                    "side (--json has every one)"
                )
                table.caption_justify = "left"
            for row in records:
                numbers = list(row_figures(row))
                if pct:
                    numbers.append(percent_change(row["diff_pct"]))
                table.add_row(cell(row[what], 200), *numbers)
            show(console, table)
    for entry in result.foreseen:  # a blocking trace of ours against a pipelined one
        table = Table(
            title=Text(
                "Pipelining: A's trace alone foresaw B's step"
                + ("" if one_pair else f" · {entry['pair']}")
            ),
            title_justify="left",
            caption=Text(  # the reason quotes the trace's rules: data, not markup
                f"A and B read as any engine's trace (bubblelab analyze A --domain none); "
                f"{z_words(entry)}. Both under nsys: the profiled engine's "
                "speedup (nsys slows the host, so without it the engine gains less). "
                f"{KEPT_GPU_WORK}." + (f" ~: {entry['unsure']}." if entry.get("unsure") else "")
            ),
            caption_justify="left",
        )
        table.add_column("", overflow="fold")
        for name in ("foreseen (A)", "measured (B)", "difference"):
            table.add_column(name, justify="right", no_wrap=True)
        for row in foreseen_rows(entry):
            table.add_row(*row)
        show(console, table)
        if said := unprofiled_words(entry):
            console.print(Text(f"{said}."))
