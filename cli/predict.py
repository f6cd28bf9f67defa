"""CLI commands for costmodel/: `predict` (the post's table, for the post or for our runs) and
`report`."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..core.errors import BubblelabError
from . import options
from .output import check_json_dest, console_for, emit_json

if TYPE_CHECKING:  # pandas is imported by the commands, not for --help
    import pandas as pd


def _pct(v: float, lo: float | None = None, hi: float | None = None) -> str:
    if v is None or math.isnan(v):
        return "–"
    text = f"{v:+.1f}%"
    if lo is not None and not math.isnan(lo):
        text += f" [dim][{lo:.1f}, {hi:.1f}][/dim]"
    return text


def _errors(predicted: float, error: float) -> str:
    return f"{_pct(predicted)} [dim]({error:+.1f})[/dim]"


def prediction_table(table: pd.DataFrame, blog: bool) -> Table:
    """The post's table (blog) or ours: per configuration, the post's per-step model, the whole-run
    model (both runs' pieces) and the same from depth 1 alone, each with its error in points, and
    the observed speedup with its interval over repeat pairs."""
    title = (
        "The post's table, re-predicted" if blog else "Predicted vs observed, depth 2 over depth 1"
    )
    out = Table(title=title, title_justify="left", header_style="bold")
    out.add_column("configuration")
    per_step = "predicted [z: 1/L..0]" if blog else "per step (error)"
    for name in ("blocking ms", "pipelined ms", "L", "z", per_step):
        out.add_column(name, justify="right", no_wrap=True)
    extra = ["post's prediction"] if blog else ["whole run (error)", "depth 1 alone (error)"]
    for name in (*extra, "observed [95%]"):
        out.add_column(name, justify="right", no_wrap=True)
    if blog:
        out.add_column("error", justify="right", no_wrap=True)
    for r in table.itertuples():
        cells = [r.label, f"{r.blocking_ms:.2f}", f"{r.pipelined_ms:.2f}", f"{r.L:.0f}",
                 f"{100 * r.z:.2f}%"]  # fmt: skip
        if blog:
            cells += [
                _pct(r.predicted_pct, r.predicted_lo, r.predicted_hi),
                _pct(r.published_pct),
                _pct(r.observed_pct),
                f"{r.error_pts:+.1f} pts",
            ]
        else:
            observed = _pct(r.observed_pct, r.observed_lo, r.observed_hi)
            if not r.observed_known:
                observed += " [yellow]?[/yellow]"
            whole = _errors(r.wall_predicted_pct, r.wall_error_pts)
            if r.wall_scope == "window":  # a trimmed trace: the model predicts its window
                whole += f" [dim]window, measured {_pct(r.wall_observed_pct)}[/dim]"
            cells += [
                _errors(r.predicted_pct, r.error_pts),
                whole,
                _errors(r.wall_d1_predicted_pct, r.wall_d1_error_pts),
                observed,
            ]
        out.add_row(*cells)
    if not blog:
        out.caption = (
            "error: observed − predicted, points. ?: the observed speedup is not known to ±1 point "
            "(its 95% interval over repeat pairs is wider, or there are fewer than 5 pairs)"
        )
    return out


def tp_lines(table: pd.DataFrame) -> list[str]:
    """For each tensor-parallel row of the prediction table: whose pieces the model used and what
    they measured (costmodel.tensor_parallel.tp_columns)."""
    lines = []
    for r in table.to_dict("records"):
        if (r.get("tensor_parallel") or 1) <= 1:
            continue
        lines.append(f"{r['label']}: GPU pieces: {r['gpu_from']}")
        if r.get("tp_gpu_ms") is not None and not math.isnan(r["tp_gpu_ms"]):
            lines.append(
                f"  depth 1, median ms a step: rank 0's GPU {r['rank0_gpu_ms']:.3f}, across ranks "
                f"{r['tp_gpu_ms']:.3f}; straggler {r['straggler_extra_ms']:.3f} after rank 0; "
                f"hand-off lag {r['handoff_lag_ms']:.3f} (taken out: depth 2 hands over ahead; "
                f"its lag {_num(r.get('handoff_lag_d2_ms'))}); rank 0's hand-off "
                f"{_num(r.get('handoff_host_ms'))} in its tick; host launch + finalize: rank 0 "
                f"{_num(r.get('rank0_host_ms'))}, slowest worker {_num(r.get('worker_host_ms'))}"
            )
    return lines


def tp_table(comparison: pd.DataFrame) -> Table:
    """What pipelining buys at each tensor-parallel size, observed and predicted."""
    out = Table(
        title="Depth 2 over depth 1 at each tensor-parallel size",
        title_justify="left",
        header_style="bold",
    )
    for name in ("model · device · streams", "TP", "blocking ms", "pipelined ms", "per step",
                 "whole run", "depth 1 alone", "observed [95%]"):  # fmt: skip
        out.add_column(name, justify="left" if name.startswith("model") else "right")
    for r in comparison.to_dict("records"):
        out.add_row(
            f"{r['model']} · {r['device']} · {r['streams']}",
            str(r["tensor_parallel"]),
            f"{r['blocking_ms']:.2f}",
            f"{r['pipelined_ms']:.2f}",
            _pct(r["predicted_pct"]),
            _pct(r["wall_predicted_pct"]),
            _pct(r["wall_d1_predicted_pct"]),
            _pct(r["observed_pct"], r["observed_lo"], r["observed_hi"]),
        )
    return out


def _num(v: float | None) -> str:
    return "–" if v is None or math.isnan(v) else f"{v:.3f}"


def register(app: typer.Typer) -> None:
    @app.command()
    def predict(
        run_dirs: list[Path] = typer.Argument(
            None,
            help="Run directories (results.json, any schema version) or results files; several "
            "are predicted together, e.g. TP 1 and TP 2 side by side.",
        ),
        blog: bool = typer.Option(False, "--blog", help="Use the Photon post's published inputs."),
        catalog: Path | None = typer.Option(
            None, "--catalog", help="A run directory (results.json) or a DuckDB catalog."
        ),
        json_out: str | None = options.JSON,
        n_boot: int = options.N_BOOT,
    ) -> None:
        """The post's prediction table: blocking and pipelined ms, L, predicted, observed, interval,
        error."""
        from ..costmodel.bootstrap import check_n_boot
        from ..costmodel.predict import predict_blog, predict_runs
        from ..costmodel.tensor_parallel import tp_comparison
        from ..runs.rundir import load_sources

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
                    n_boot=n_boot,
                )  # fmt: skip
            for reason in table.attrs["skipped"]:
                console.print(f"skipped {reason}", markup=False)
            if table.empty:
                raise BubblelabError(
                    f"{', '.join(map(str, sources))}: no configuration measured at both depth 1 "
                    "and depth 2"
                )
        if dest is not None:
            import json

            written = emit_json(dest, json.loads(table.to_json(orient="records")))
            if written is not None:
                console.print(f"wrote {written}", markup=False)
            if dest == "-":
                return
        if not console.is_terminal:  # piped or captured: don't squeeze the table into 80 columns
            console = console_for(dest, width=200)
        console.print(prediction_table(table, blog))
        if not blog:
            for line in tp_lines(table):
                console.print(line, markup=False)
            comparison = tp_comparison(table)
            if len(comparison):
                console.print(tp_table(comparison))

    @app.command()
    def report(
        run_dirs: list[Path] = typer.Argument(
            ...,
            help="Run directories holding results.json (or one nsys export); two or more are "
            "compared side by side.",
        ),
        out: Path | None = typer.Option(
            None, "--out", help="The page to write (default RUN_DIR/report.html for one directory)."
        ),
        demo: bool = typer.Option(
            False, "--demo", help="First fill RUN_DIR with a simulated run (no GPU needed)."
        ),
        n_boot: int = options.N_BOOT,
    ) -> None:
        """Write one self-contained page of tables and figures, and its data (trace, Parquet)
        beside it in export/. For a sweep that was interrupted or failed, from the runs that
        finished."""
        from ..core.files import check_output_path
        from ..costmodel.bootstrap import check_n_boot
        from ..report.report import report_dirs, report_run_dir
        from ..runs.assemble import assemble, needs_assembly
        from ..runs.state import damaged_runs

        check_n_boot(n_boot)
        if out is not None:
            check_output_path(out, "--out")
        if len(run_dirs) > 1 and out is None:
            raise BubblelabError("a report of several run directories needs --out PATH")
        console = Console(stderr=True)
        if demo:
            from ..runs.demo import write_demo_run_dir

            if len(run_dirs) != 1:
                raise BubblelabError("--demo fills one run directory")
            write_demo_run_dir(run_dirs[0], streams=(1, 8, 32))
        for source in run_dirs:
            if not source.exists():
                raise BubblelabError(f"{source} does not exist")
            for record in damaged_runs(source) if source.is_dir() else ():
                line = Text(f"skipped {record}: damaged (not a whole run record)")
                console.print(line, soft_wrap=True)
            if source.is_dir() and needs_assembly(source):
                with console.status(Text(f"assembling the finished runs of {source}")):
                    assemble(source)
        with console.status("writing the report"):
            if len(run_dirs) == 1:
                page = report_run_dir(run_dirs[0], n_boot=n_boot, out=out)
            else:
                assert out is not None
                page = report_dirs(run_dirs, out, n_boot=n_boot)
        typer.echo(page)
