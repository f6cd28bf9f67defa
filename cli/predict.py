"""CLI commands for costmodel/: `predict` (the post's table, for the post or for our runs) and
`report`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.text import Text

from ..core.errors import BubblelabError
from . import options
from .output import SCHEMA, STDOUT, check_json_dest, console_for, emit_and_say, emit_json, records
from .predict_tables import (
    across_table,
    blog_table,
    depth1_table,
    prediction_tables,
    tp_lines,
    tp_table,
)
from .tables import show

if TYPE_CHECKING:  # pandas is imported by the commands, not for --help
    import pandas as pd


def _across(from_dir: Path, to_dir: Path, json_out: str | None, n_boot: int) -> None:
    from ..costmodel.bootstrap import check_n_boot
    from ..costmodel.crossgpu import predict_across
    from ..runs.merge import load_sources

    check_n_boot(n_boot)
    dest = check_json_dest(json_out)
    console = console_for(dest)
    a, b = load_sources([from_dir]), load_sources([to_dir])
    table = predict_across((a.runs, a.steps, a.requests), (b.runs, b.steps, b.requests),
                           n_boot=n_boot)  # fmt: skip
    if table.empty:
        raise BubblelabError(f"no configuration of {from_dir} was measured in {to_dir} too")
    if emit_and_say(console, dest, records(table)):
        return
    show(console, across_table(table))


def unpaired(sources: list[Path], runs: pd.DataFrame) -> str:
    """Why nothing was predicted: no configuration ran at both depths; what would do it."""
    from ..costmodel.forecast import one_depth

    said = f"{', '.join(map(str, sources))}: no configuration measured at both depth 1 and depth 2"
    depth = one_depth(runs)
    if depth is None:
        return said
    if depth == 1:
        return (
            f"{said}: the forecast above is from depth 1 alone, and nothing has checked it yet; "
            "run-and-profile --depth 1,2 sets it beside what depth 2 measures"
        )
    return (
        f"{said} (its runs are all at depth {depth}): a forecast is made from depth-1 runs, so "
        "run both (run-and-profile --depth 1,2); what pipelining would buy one depth-1 nsys "
        "trace, from it alone: bubblelab analyze TRACE --domain none"
    )


def depth1_forecast(
    console: Console, results, n_boot: int = 1000, table: pd.DataFrame | None = None
) -> pd.DataFrame | None:
    """Runs at depth 1 only: their forecast (costmodel.forecast; table: the caller's, made
    already), its skipped configurations said; None when the runs are not all at depth 1 or none
    can be forecast."""
    from ..costmodel.forecast import unchecked_forecast
    from ..costmodel.power import power_limit_w

    if table is None:
        table = unchecked_forecast(
            results.runs, results.steps, results.requests, results.ranks, n_boot,
            power_limit_w=power_limit_w(results.provenance),
        )  # fmt: skip
    for reason in table.attrs.get("skipped", []):
        console.print(f"skipped {reason}", markup=False)
    return table if len(table) else None


def show_depth1(console: Console, sources: list[Path], runs: pd.DataFrame, table) -> None:
    """depth1_forecast's table, what it cannot pin down, and that nothing has checked it."""
    from ..costmodel.headline import caveat_lines

    show(console, depth1_table(table))
    for line in [*caveat_lines(table), unpaired(sources, runs)]:
        console.print(line, markup=False)


def register(app: typer.Typer) -> None:
    @app.command()
    def predict(
        run_dirs: list[Path] = typer.Argument(
            None,
            metavar="RUN_DIRS",
            help="Run directories (results.json, any schema version) or results files; several "
            "are predicted together, e.g. TP 1 and TP 2 side by side; a sweep's --depth 1 and "
            "--depth 2 halves pair up.",
        ),
        blog: bool = typer.Option(
            False, "--blog", metavar="", help="Use the Photon post's published inputs."
        ),
        catalog: Path | None = typer.Option(
            None, "--catalog", help="A run directory (results.json) or a DuckDB catalog."
        ),
        from_dir: Path | None = typer.Option(
            None, "--from", help="Forecast another card's runs from this run directory's depth 1."
        ),
        to_dir: Path | None = typer.Option(
            None, "--to", help="...the run directory of the card to forecast (with --from)."
        ),
        json_out: str | None = options.JSON,
        n_boot: int = options.N_BOOT,
    ) -> None:
        """Forecast what pipelining buys from the depth-1 runs alone, beside what was observed.

        Then what explains each measured speedup. --from A --to B: card B's speedup from card A's
        depth-1 runs."""
        from ..costmodel.blog import predict_blog
        from ..costmodel.bootstrap import check_n_boot
        from ..costmodel.headline import caveat_lines, handoff_lines, noise_lines
        from ..costmodel.power import power_limit_w
        from ..costmodel.predict import predict_runs
        from ..costmodel.spread import source_lines
        from ..costmodel.tensor_parallel import tp_comparison
        from ..runs.merge import load_sources
        from ..runs.split_sweep import split_line

        if (from_dir is None) != (to_dir is None):
            raise BubblelabError("give --from A and --to B together")
        if from_dir is not None and to_dir is not None:
            if blog or run_dirs or catalog is not None:
                raise BubblelabError("--from/--to take no other source")
            _across(from_dir, to_dir, json_out, n_boot)
            return
        sources = [*(run_dirs or []), *([catalog] if catalog is not None else [])]
        if blog == bool(sources) or (catalog is not None and len(sources) > 1):
            raise BubblelabError("give RUN_DIR (one or more), --catalog PATH or --blog")
        check_n_boot(n_boot)
        dest = check_json_dest(json_out)
        console = console_for(dest)
        if blog:
            table = predict_blog()
        else:
            results = load_sources(sources)
            with console.status(f"predicting ({n_boot} bootstrap resamples)"):
                table = predict_runs(
                    results.runs, results.steps, results.requests, ranks=results.ranks,
                    n_boot=n_boot, power_limit_w=power_limit_w(results.provenance),
                )  # fmt: skip
            for reason in table.attrs["skipped"]:
                console.print(f"skipped {reason}", markup=False)
            if table.empty:
                if (forecast := depth1_forecast(console, results, n_boot)) is None:
                    raise BubblelabError(unpaired(sources, results.runs))
                if not emit_and_say(console, dest, records(forecast)):
                    show_depth1(console_for(dest), sources, results.runs, forecast)
                return
        if emit_and_say(console, dest, records(table)):
            return
        if not console.is_terminal:  # piped or captured: don't squeeze the table into 80 columns
            console = console_for(dest)
        if blog:
            show(console, blog_table(table))
            return
        for printed in prediction_tables(table):
            show(console, printed)
        noise_from = source_lines(table, results.steps)  # whose noise an unknown speedup's is
        said = [*noise_lines(table), *caveat_lines(table), *handoff_lines(table), *noise_from]
        said += [line] if (line := split_line(results.provenance)) else []
        for line in said:
            console.print(line, markup=False)
        for line in tp_lines(table):
            console.print(line, markup=False)
        comparison = tp_comparison(table)
        if len(comparison):
            show(console, tp_table(comparison))

    @app.command()
    def report(
        run_dirs: list[Path] = typer.Argument(
            ...,
            metavar="RUN_DIRS",
            help="Run directories holding results.json, results files or one nsys export; two or "
            "more are compared side by side (a sweep's --depth 1 and --depth 2 halves pair up).",
        ),
        out: Path | None = typer.Option(
            None, "--out", help="The page to write (default RUN_DIR/report.html for one directory)."
        ),
        demo: bool = typer.Option(
            False,
            "--demo",
            metavar="",
            help="First fill RUN_DIR with a simulated run (no GPU needed).",
        ),
        n_boot: int = options.N_BOOT,
        json_out: str | None = options.JSON,
    ) -> None:
        """Write one self-contained page of tables and figures for run directories or a trace.

        Its data (trace, Parquet) goes beside it in export/. For a sweep that was interrupted or
        failed, the page is made from the runs that finished."""
        from ..core.files import check_output_path
        from ..costmodel.bootstrap import check_n_boot
        from ..report.report import report_dirs, report_run_dir
        from ..runs.assemble import assemble, needs_assembly
        from ..runs.state import damaged_runs

        check_n_boot(n_boot)
        dest = check_json_dest(json_out)
        if out is not None:
            check_output_path(out, "--out")
        if len(run_dirs) > 1 and out is None:
            raise BubblelabError("a report of several run directories needs --out PATH")
        console, skipped = Console(stderr=True), []
        if demo:
            from ..runs.demo import write_demo_run_dir

            if len(run_dirs) != 1:
                raise BubblelabError("--demo fills one run directory")
            write_demo_run_dir(run_dirs[0], streams=(1, 8, 32))
        for source in run_dirs:
            if not source.exists():
                raise BubblelabError(f"{source} does not exist")
            for record in damaged_runs(source) if source.is_dir() else ():
                skipped.append(f"{record}: damaged (not a whole run record)")
                console.print(Text(f"skipped {skipped[-1]}"), soft_wrap=True)
            if source.is_dir() and needs_assembly(source):
                with console.status(Text(f"assembling the finished runs of {source}")):
                    assemble(source)
        with console.status("writing the report"):
            if len(run_dirs) == 1:
                page = report_run_dir(run_dirs[0], n_boot=n_boot, out=out)
            else:
                assert out is not None
                page = report_dirs(run_dirs, out, n_boot=n_boot)
        typer.echo(page, err=dest == STDOUT)
        written = emit_json(dest, {"schema": SCHEMA, "report": str(page), "skipped": skipped})
        if written is not None:
            console.print(Text(f"wrote {written}"), soft_wrap=True)
