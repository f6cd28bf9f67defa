"""CLI commands for costmodel/: `predict` (the post's table, for the post or for our runs) and
`report`."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ..core.errors import BubblelabError
from . import options
from .output import SCHEMA, STDOUT, check_json_dest, console_for, emit_and_say, emit_json, records
from .tables import show

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


def _marked(text: str) -> str:
    """costmodel.headline's text, its `?` in yellow (the numbers themselves carry no markup)."""
    return escape(text).replace(" ?", " [yellow]?[/yellow]")


def blog_table(table: pd.DataFrame) -> Table:
    """The post's table, re-predicted: its periods, L, z, our prediction with its z bounds, the
    post's own, what it observed."""
    out = Table(title="The post's table, re-predicted", title_justify="left", header_style="bold")
    out.add_column("configuration")
    for name in ("blocking ms", "pipelined ms", "L", "z", "predicted [z: 1/L..0]",
                 "post's prediction", "observed", "error"):  # fmt: skip
        out.add_column(escape(name), justify="right", no_wrap=True)  # [z: ...] is not markup
    for r in table.itertuples():
        out.add_row(
            r.label, f"{r.blocking_ms:.2f}", f"{r.pipelined_ms:.2f}", f"{r.L:.0f}",
            f"{100 * r.z:.2f}%", _pct(r.predicted_pct, r.predicted_lo, r.predicted_hi),
            _pct(r.published_pct), _pct(r.observed_pct), f"{r.error_pts:+.1f} pts",
        )  # fmt: skip
    return out


def forecast_table(table: pd.DataFrame) -> Table:
    """The headline, first: per configuration the forecast from the depth-1 run alone and the
    observed speedup, each with its 95% interval and `?` when not known to ±1 point, the miss
    between them, and how much the runs varied (costmodel.headline: nothing here reads depth 2's
    pieces)."""
    from ..costmodel.headline import pct_text, pts_text

    out = Table(
        title="Depth 2 over depth 1: forecast from the depth-1 run alone, and observed",
        title_justify="left",
        header_style="bold",
    )
    out.add_column("configuration")
    for name in ("from depth 1 alone [95%]", "observed [95%]", "pairs", "miss [95%]",
                 "CV of wall d1 · d2"):  # fmt: skip
        out.add_column(name, justify="right", no_wrap=True)
    for r in table.to_dict("records"):
        out.add_row(
            r["label"],
            _marked(
                pct_text(
                    r["wall_d1_predicted_pct"], r["wall_d1_predicted_lo"], r["wall_d1_predicted_hi"]
                )
            ),  # fmt: skip
            _marked(
                pct_text(r["observed_pct"], r["observed_lo"], r["observed_hi"], r["observed_known"])
            ),  # fmt: skip
            str(r["pairs"]),
            _marked(pts_text(r["wall_d1_error_pts"], r["wall_d1_error_lo"], r["wall_d1_error_hi"])),
            f"{_num(r.get('wall_cv_d1_pct'), 1)}% · {_num(r.get('wall_cv_d2_pct'), 1)}%",
        )
    out.caption = (
        "?: not known to ±1 point (its 95% interval is wider, or under the 6 pairs 95% needs). "
        "from depth 1 alone: the whole-run model fed the depth-1 run only (its schedule at depth 2 "
        "replayed from the requests). observed: the median repeat pair. miss: observed − forecast, "
        "points. CV: wall per token over the repeats, where repeats run their own requests the "
        "workload's spread too (step_cv_d1_pct / _d2_pct in --json: each run's median step, the "
        "noise alone)"
    )
    return out


def explanation_table(table: pd.DataFrame) -> Table:
    """What explains each measured speedup: the post's per-step model on the measured periods and
    the whole-run model fed depth 2's own pieces, with the pieces that move the forecast most.
    Both read the depth-2 run: no forecast, no accuracy claim."""
    from ..costmodel.headline import explanation

    out = Table(
        title="What explains the measured speedup (these read the depth-2 run)",
        title_justify="left",
        header_style="bold",
    )
    out.add_column("configuration")
    columns = (
        "blocking ms",
        "pipelined ms",
        "L",
        "z",
        "post, per step (error)",
        "whole run, depth 2's pieces (error)",
        "depth-2 pieces that make the miss",
    )
    for name in columns:
        out.add_column(name, justify="right", no_wrap=True)
    for r in table.itertuples():
        whole = _errors(r.wall_predicted_pct, r.wall_error_pts)
        if r.wall_scope == "window":  # a trimmed trace: the model predicts its window
            whole += f" [dim]window, measured {_pct(r.wall_observed_pct)}[/dim]"
        out.add_row(
            r.label, f"{r.blocking_ms:.2f}", f"{r.pipelined_ms:.2f}", f"{r.L:.0f}",
            f"{100 * r.z:.2f}%", _errors(r.predicted_pct, r.error_pts), whole,
            escape(explanation(r._asdict())),
        )  # fmt: skip
    out.caption = "error: observed − that model, points"
    return out


def prediction_tables(table: pd.DataFrame) -> list[Table]:
    """Our runs: the forecast first, then what explains the measurement."""
    return [forecast_table(table), explanation_table(table)]


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
    for name in ("model · device · streams", "TP", "depth 1 alone", "observed [95%]",
                 "blocking ms", "pipelined ms", "per step", "whole run"):  # fmt: skip
        out.add_column(name, justify="left" if name.startswith("model") else "right")
    for r in comparison.to_dict("records"):
        out.add_row(
            f"{r['model']} · {r['device']} · {r['streams']}",
            str(r["tensor_parallel"]),
            _pct(r["wall_d1_predicted_pct"]),
            _pct(r["observed_pct"], r["observed_lo"], r["observed_hi"]),
            f"{r['blocking_ms']:.2f}",
            f"{r['pipelined_ms']:.2f}",
            _pct(r["predicted_pct"]),
            _pct(r["wall_predicted_pct"]),
        )
    return out


def across_table(table: pd.DataFrame) -> Table:
    """Card B's speedup forecast from card A's depth-1 runs, beside what B observed."""
    from ..costmodel.headline import pct_text, pts_text

    out = Table(
        title="Depth 2 over depth 1 on another card, forecast from this card's depth-1 runs",
        title_justify="left",
        header_style="bold",
    )
    out.add_column("configuration")
    for name in ("from", "GPU · host ratio", "forecast [95%]", "observed [95%]", "miss"):
        out.add_column(name, justify="right", no_wrap=True)
    for r in table.to_dict("records"):
        out.add_row(
            r["label"], str(r["from_device"]), f"{r['gpu_ratio']:.2f} · {r['host_ratio']:.2f}",
            _marked(pct_text(r["across_predicted_pct"], r["across_predicted_lo"],
                             r["across_predicted_hi"])),
            _marked(pct_text(r["observed_pct"], r["observed_lo"], r["observed_hi"],
                             r["observed_known"])),
            pts_text(r["across_error_pts"]).removesuffix(" ?"),
        )  # fmt: skip
    out.caption = (
        "ratio: the other card's GPU span of a steady decode step and its host tick over this "
        "card's (costmodel.crossgpu says what the forecast assumes)"
    )
    return out


def _across(from_dir: Path, to_dir: Path, json_out: str | None, n_boot: int) -> None:
    from ..costmodel.bootstrap import check_n_boot
    from ..costmodel.crossgpu import predict_across
    from ..runs.rundir import load_sources

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
    from ..costmodel.predict import one_depth

    said = f"{', '.join(map(str, sources))}: no configuration measured at both depth 1 and depth 2"
    depth = one_depth(runs)
    if depth is None:
        return said
    return (
        f"{said} (its runs are all at depth {depth}): the table sets each forecast beside "
        "what depth 2 measured, so run both (run-and-profile --depth 1,2); what pipelining would "
        "buy one depth-1 nsys trace, from it alone: bubblelab analyze TRACE --domain none"
    )


def _num(v: float | None, nd: int = 3) -> str:
    return "–" if v is None or math.isnan(v) else f"{v:.{nd}f}"


def register(app: typer.Typer) -> None:
    @app.command()
    def predict(
        run_dirs: list[Path] = typer.Argument(
            None,
            metavar="RUN_DIRS",
            help="Run directories (results.json, any schema version) or results files; several "
            "are predicted together, e.g. TP 1 and TP 2 side by side.",
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
        from ..costmodel.predict import predict_runs
        from ..costmodel.spread import source_lines
        from ..costmodel.tensor_parallel import tp_comparison
        from ..runs.rundir import load_sources

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
                    n_boot=n_boot,
                )  # fmt: skip
            for reason in table.attrs["skipped"]:
                console.print(f"skipped {reason}", markup=False)
            if table.empty:
                raise BubblelabError(unpaired(sources, results.runs))
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
            help="Run directories holding results.json (or one nsys export); two or more are "
            "compared side by side.",
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
