"""The cost model against H200 sweeps: the tables and the plot of docs/h200-costmodel.md, a report.

    .venv/bin/python -m tools.docs.h200_costmodel_table                       # the schema-1 sweep
    .venv/bin/python -m tools.docs.h200_costmodel_table \\
        --sweep docs/measurements/2026-11-23/costmodel-dev \\
        --sweep docs/measurements/2026-11-23/costmodel-heldout --plot docs/h200-costmodel.png

Each --sweep is a folder of sweeps: run directories (DIR/<name>/results.json[.gz], any schema
version) or results files (DIR/[dev-|held-out-]<name>.results.json[.gz]). Per configuration: the
observed speedup over repeat pairs, the post's per-step model, the whole-run model (both runs'
pieces) and the same from depth 1 alone, each with its error and the error's interval over pairs;
the terms between the two. Held-out rows carry their ids (docs/costmodel-heldout.md).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib
import pandas as pd

from bubblelab.core.files import write_atomic
from bubblelab.costmodel.predict import predict_runs
from bubblelab.costmodel.wholerun import TERMS
from bubblelab.report.report import render_report
from bubblelab.runs.merge import merge_results
from bubblelab.runs.rundir import (
    RESULTS_FILE,
    is_results_file,
    read_results,
    results_path,
)

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)

SWEEP = Path("docs/measurements/h200-sweep")
TARGET_PTS = 1.0  # the accuracy the model is held to, in points of speedup
PREFIXES = ("dev-", "held-out-")  # how the GPU calls name their results files
# docs/costmodel-heldout.md's rows, in the held-out call's files: (sweep name, streams) -> id
HELD_OUT = {
    ("qwen3-8b", 16): "H1",
    ("qwen3-1.7b-short", 64): "H2",
    ("qwen3-1.7b-short", 2): "H3",
    ("qwen3-0.6b-detect", 8): "H4",
    ("qwen3-0.6b-detect", 32): "H5",
    ("qwen3-4b-long", 64): "H6",
    ("llama-3.2-1b", 4): "H7",
    ("llama-3.2-1b", 32): "H8",
}


def sources(sweep: Path) -> dict[str, Path]:
    """name -> run directory or results file, for every sweep in the folder."""
    found = {}
    for path in sorted(sweep.iterdir()):
        if path.is_dir() and results_path(path):
            found[path.name] = path
        elif is_results_file(path):
            name = path.name.removesuffix(".gz").removesuffix(RESULTS_FILE).removesuffix(".")
            found[next((name[len(p) :] for p in PREFIXES if name.startswith(p)), name)] = path
    return found


def sweep_table(sweeps: list[Path], n_boot: int) -> tuple[pd.DataFrame, dict]:
    """The prediction table of every configuration in the sweeps (columns of predict_runs, plus
    name, set = the sweep folder's name, and id = the held-out row's id or "")."""
    tables, named = [], {}
    for sweep in sweeps:
        rows = []
        for name, path in sources(sweep).items():
            key = name if len(sweeps) == 1 else f"{sweep.name}/{name}"  # one report, apart
            results = named[key] = read_results(path)
            table = predict_runs(results.runs, results.steps, results.requests, n_boot=n_boot)
            held_out = path.name.startswith("held-out-")  # the held-out call's files only
            ids = [HELD_OUT.get((name, int(s)), "") if held_out else "" for s in table["streams"]]
            rows.append(table.assign(name=name, set=sweep.name, id=ids))
        table = pd.concat(rows, ignore_index=True)
        order = table["id"].where(table["id"] != "", "~")  # held-out rows in id order
        tables.append(table.iloc[order.argsort(kind="stable")])
    return pd.concat(tables, ignore_index=True), named


def _pct(v: float, lo: float | None = None, hi: float | None = None) -> str:
    text = f"{v:+.1f}%"
    return text if lo is None or lo != lo else f"{text} [{lo:.1f}, {hi:.1f}]"


def _error(r, prefix: str) -> str:
    err, lo, hi = (getattr(r, f"{prefix}_error_{k}") for k in ("pts", "lo", "hi"))
    miss = "" if abs(err) <= TARGET_PTS else " ✗"
    return f"{_pct(getattr(r, f'{prefix}_predicted_pct'))} ({err:+.1f} [{lo:.1f}, {hi:.1f}]){miss}"


def markdown(table: pd.DataFrame) -> str:
    """One row per configuration; ✗: more than TARGET_PTS off; ?: observed not known to ±1."""
    ids = bool((table["id"] != "").any())
    head = ["id"] * ids + [
        "run · streams", "pairs", "observed [95%]", "per step (error)", "whole run (error [95%])",
        "from depth 1 alone (error [95%])", *TERMS,
    ]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in table.itertuples():
        known = "" if r.observed_known else " ?"
        cells = [r.id] * ids + [
            f"{r.name} · {r.streams}",
            str(r.pairs),
            _pct(r.observed_pct, r.observed_lo, r.observed_hi) + known,
            f"{_pct(r.predicted_pct)} ({r.error_pts:+.1f})",
            _error(r, "wall"),
            _error(r, "wall_d1"),
            *(f"{getattr(r, f'term_{t}_pts'):+.1f}" for t in TERMS),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summary(table: pd.DataFrame) -> str:
    """Per prediction: rows within TARGET_PTS and the largest miss (which row), by rule."""
    out = []
    predictions = (
        ("wall_error_pts", "whole-run model"),
        ("wall_d1_error_pts", "from depth 1 alone"),
        ("error_pts", "the post's per-step model"),
    )
    for col, name in predictions:
        err = table[col].abs()
        worst = table.loc[err.idxmax()]
        label = (worst["id"] + " " if worst["id"] else "") + f"{worst['name']} · {worst['streams']}"
        out.append(f"{name}: within {TARGET_PTS:.0f} point on {(err <= TARGET_PTS).sum()} of "
                   f"{len(table)} rows, largest miss {err.max():.1f} points ({label})")  # fmt: skip
    out.append(f"observed known to ±1 point: {int(table['observed_known'].sum())} of {len(table)}")
    return "\n".join(out)


def plot(table: pd.DataFrame, path: Path) -> None:
    """Predicted against observed, one small panel per prediction; observed 95% intervals across,
    the error's 95% interval (over repeat pairs) up for the whole-run models; held-out rows as
    squares labelled with their ids."""
    panels = (
        ("predicted_pct", None, "the post's per-step model", "tab:blue"),
        ("wall_d1_predicted_pct", "wall_d1_error", "whole run, from depth 1 alone", "tab:orange"),
        ("wall_predicted_pct", "wall_error", "whole run, both runs' pieces", "tab:red"),
    )
    points = table[["observed_pct", "predicted_pct", "wall_predicted_pct", "wall_d1_predicted_pct"]]
    lim = [float(points.min().min()) - 2, float(points.max().max()) + 2]
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.9), sharey=True)
    for ax, (col, err, label, color) in zip(axes, panels, strict=True):
        ax.plot(lim, lim, color="black", lw=0.6)
        ax.fill_between(lim, [v - TARGET_PTS for v in lim], [v + TARGET_PTS for v in lim],
                        color="0.88", label=f"±{TARGET_PTS:.0f} point")  # fmt: skip
        for held_out, rows in table.groupby(table["id"] != ""):
            yerr = None
            if err:  # the error's interval, drawn around the prediction
                yerr = [rows[f"{err}_hi"] - rows[f"{err}_pts"],
                        rows[f"{err}_pts"] - rows[f"{err}_lo"]]  # fmt: skip
            xerr = [rows["observed_pct"] - rows["observed_lo"],
                    rows["observed_hi"] - rows["observed_pct"]]  # fmt: skip
            ax.errorbar(rows["observed_pct"], rows[col], xerr=xerr, yerr=yerr,
                        fmt="s" if held_out else "o", mfc=color if held_out else "white",
                        color=color, ms=4, capsize=1.5, lw=0.7,
                        label="held out" if held_out else "development")  # fmt: skip
        for r in table.itertuples():
            short = r.id or f"{r.name.replace('qwen3-', '')}·{r.streams}"
            ax.annotate(short, (r.observed_pct, getattr(r, col)), fontsize=5.5, xytext=(2, 2),
                        textcoords="offset points")  # fmt: skip
        ax.set(xlim=lim, ylim=lim, title=label)
        ax.title.set_fontsize(9)
        ax.set_xlabel("observed speedup (%), 95% over repeat pairs", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.legend(loc="upper left", fontsize=6.5)
    axes[0].set_ylabel("predicted speedup (%)", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def plot_terms(table: pd.DataFrame, path: Path) -> None:
    """Per row, the error of the depth-1-alone prediction (observed − predicted, a dot with its 95%
    interval over pairs) beside the measured terms that lead from it to the model (stacked bars):
    where they meet, the miss is named."""
    terms = TERMS[1:]  # admission is inside both predictions
    colors = dict(replay="tab:purple", forward="tab:red", host="tab:green", handoff="tab:orange",
                  overhead="tab:gray")  # fmt: skip
    labels = [r.id or f"{r.name.replace('qwen3-', '')}·{r.streams}" for r in table.itertuples()]
    y = range(len(table))[::-1]
    fig, ax = plt.subplots(figsize=(6, 0.22 * len(table) + 1.0))
    for sign in (1, -1):  # positive terms stack right, negative left
        left = pd.Series(0.0, index=table.index)
        for t in terms:
            v = table[f"term_{t}_pts"].where(table[f"term_{t}_pts"] * sign > 0, 0.0)
            ax.barh(y, v, left=left, height=0.6, color=colors[t], label=t if sign > 0 else None)
            left += v
    err = table["wall_d1_error_pts"]
    xerr = [err - table["wall_d1_error_lo"], table["wall_d1_error_hi"] - err]
    ax.errorbar(err, y, xerr=xerr, fmt="o", color="black", ms=3, lw=0.7, capsize=1.5,
                label="error from depth 1 alone")  # fmt: skip
    ax.axvspan(-TARGET_PTS, TARGET_PTS, color="0.92", zorder=0)
    ax.axvline(0, color="black", lw=0.5)
    ax.set_yticks(list(y), labels, fontsize=7)
    ax.set_xlabel("points of speedup", fontsize=8)
    ax.tick_params(axis="x", labelsize=7)
    ax.legend(fontsize=6, loc="lower right", ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", type=Path, action="append",
                        help=f"a folder of sweeps (repeatable; default {SWEEP})")  # fmt: skip
    parser.add_argument("--plot", type=Path, help="write the predicted-vs-observed plot here (PNG)")
    parser.add_argument("--plot-terms", type=Path, help="write the depth-1-alone terms here (PNG)")
    parser.add_argument("--report", type=Path, help="write one HTML report of the sweeps here")
    parser.add_argument("--json", type=Path, help="write the prediction table here (records)")
    parser.add_argument("--n-boot", type=int, default=1000)
    args = parser.parse_args()
    table, named = sweep_table(args.sweep or [SWEEP], args.n_boot)
    for name, rows in table.groupby("set", sort=False):
        print(f"{name}:\n\n{markdown(rows)}\n\n{summary(rows)}\n")
    if args.plot:
        plot(table, args.plot)
    if args.plot_terms:
        plot_terms(table, args.plot_terms)
    if args.json:
        args.json.write_text(table.to_json(orient="records", indent=1))
    if args.report:
        title = " + ".join(p.name for p in args.sweep or [SWEEP])
        # Without export/: the trace and tables (~8 MB, all derived from the committed
        # results.json.gz) stay out of git; the page says how to write them.
        html = render_report(merge_results(named), title=title, n_boot=args.n_boot)
        page = write_atomic(args.report, html)
        print(f"{page}: {page.stat().st_size / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
