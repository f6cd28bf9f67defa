"""The prediction's terminal tables: the post's (--blog), ours (the forecast first, then what
explains the measurement), tensor parallel, across cards, and depth 1's forecast alone."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from rich.markup import escape
from rich.table import Table

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


def _by_configuration(title: str, columns: tuple[str, ...]) -> Table:
    """A table of one row per configuration: its label, then right-aligned figures that never
    wrap."""
    out = Table(title=title, title_justify="left", header_style="bold")
    out.add_column("configuration")
    for name in columns:
        out.add_column(name, justify="right", no_wrap=True)
    return out


def _forecast_cell(r: dict) -> str:
    """The forecast from depth 1 alone with its interval, `?` marked (costmodel.headline)."""
    from ..costmodel.headline import pct_text

    value, lo, hi = (r[f"wall_d1_predicted{k}"] for k in ("_pct", "_lo", "_hi"))
    return _marked(pct_text(value, lo, hi, r.get("wall_d1_predicted_known")))


def blog_table(table: pd.DataFrame) -> Table:
    """The post's table, re-predicted: its periods, L, z, our prediction with its z bounds, the
    post's own, what it observed."""
    names = ("blocking ms", "pipelined ms", "L", "z", "predicted [z: 1/L..0]",
             "post's prediction", "observed", "error")  # fmt: skip
    # [z: ...] is not markup
    out = _by_configuration("The post's table, re-predicted", tuple(map(escape, names)))
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
    from ..costmodel.headline import miss_text, pct_text

    out = _by_configuration(
        "Depth 2 over depth 1: forecast from the depth-1 run alone, and observed",
        ("from depth 1 alone [95%]", "observed [95%]", "pairs", "miss [95%]", "CV of wall d1 · d2"),
    )
    for r in table.to_dict("records"):
        out.add_row(
            r["label"],
            _forecast_cell(r),
            _marked(
                pct_text(r["observed_pct"], r["observed_lo"], r["observed_hi"], r["observed_known"])
            ),  # fmt: skip
            str(r["pairs"]),
            _marked(miss_text(r)),
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

    out = _by_configuration(
        "What explains the measured speedup (these read the depth-2 run)",
        ("blocking ms", "pipelined ms", "L", "z", "post, per step (error)",
         "whole run, depth 2's pieces (error)", "depth-2 pieces that make the miss"),
    )  # fmt: skip
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

    out = _by_configuration(
        "Depth 2 over depth 1 on another card, forecast from this card's depth-1 runs",
        ("from", "GPU · host ratio", "forecast [95%]", "observed [95%]", "miss"),
    )
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


def depth1_table(table: pd.DataFrame) -> Table:
    """Runs at depth 1 only (costmodel.forecast): what depth 2 would buy, forecast from them alone,
    with the interval over their repeats; nothing has checked it yet."""
    out = _by_configuration(
        "What depth 2 would buy, forecast from the depth-1 runs alone (not yet checked)",
        ("from depth 1 alone [95%]", "repeats", "tokens/s d1", "d2 forecast", "CV of wall d1"),
    )
    for r in table.to_dict("records"):
        out.add_row(
            r["label"],
            _forecast_cell(r),
            str(r["repeats"]),
            _num(r["tokens_per_s_d1"], 1),
            _num(r["tokens_per_s_forecast"], 1),
            f"{_num(r['wall_cv_d1_pct'], 1)}%",
        )  # fmt: skip
    out.caption = (
        "?: not known to ±1 point (its interval over the repeats is wider, or under the 6 "
        "repeats a 95% interval needs). The whole-run model fed each depth-1 run only: its "
        "schedule at depth 2 replayed from its requests, costed with its own measured pieces (the "
        "forecast predict sets beside the observed speedup when depth 2 runs too). The interval is "
        "the repeats' spread, not the model's error: how far it has missed where depth 2 ran is in "
        "the README ('Does the post's model predict what pipelining wins?')"
    )
    return out


def _num(v: float | None, nd: int = 3) -> str:
    return "–" if v is None or math.isnan(v) else f"{v:.{nd}f}"
