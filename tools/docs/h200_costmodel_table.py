"""The cost model against H200 run directories: the table, the plot, and one report for them.

    .venv/bin/python -m tools.docs.h200_costmodel_table                       # the schema-1 sweep
    .venv/bin/python -m tools.docs.h200_costmodel_table --sweep DIR \\
        --plot docs/h200-costmodel.png --report reports/h200-sweep/report.html

--sweep is a folder of run directories (each DIR/results.json[.gz], any schema version). Per
configuration: the observed speedup over repeat pairs, the post's per-step model, the whole-run
model (both runs' pieces) and the same from depth 1 alone, each with its error; the terms between.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib
import pandas as pd

from bubblelab.costmodel.predict import predict_runs
from bubblelab.costmodel.wholerun import TERMS
from bubblelab.report.report import report_dirs
from bubblelab.runs.rundir import read_results, results_path

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)

SWEEP = Path("docs/measurements/h200-sweep")
TARGET_PTS = 1.0  # the accuracy the model is held to, in points of speedup


def sweep_table(sweep: Path, n_boot: int) -> pd.DataFrame:
    rows = []
    for run_dir in sorted(p for p in sweep.iterdir() if results_path(p)):
        results = read_results(run_dir)
        table = predict_runs(results.runs, results.steps, results.requests, n_boot=n_boot)
        rows.append(table.assign(name=run_dir.name))
    return pd.concat(rows, ignore_index=True)


def _pct(v: float, lo: float | None = None, hi: float | None = None) -> str:
    text = f"{v:+.1f}%"
    return text if lo is None or lo != lo else f"{text} [{lo:.1f}, {hi:.1f}]"


def markdown(table: pd.DataFrame) -> str:
    head = (
        "| run · streams | pairs | observed [95%] | per step (error) | whole run (error [95%]) "
        "| from depth 1 alone (error) | " + " | ".join(TERMS[1:]) + " |"
    )
    lines = [head, "|" + "---|" * head.count(" | ") + "---|"]
    for r in table.itertuples():
        known = "" if r.observed_known else " ?"
        miss = "" if abs(r.wall_error_pts) <= TARGET_PTS else " ✗"
        miss_d1 = "" if abs(r.wall_d1_error_pts) <= TARGET_PTS else " ✗"
        terms = " | ".join(f"{getattr(r, f'term_{t}_pts'):+.1f}" for t in TERMS[1:])
        lines.append(
            f"| {r.name} · {r.streams} | {r.pairs} "
            f"| {_pct(r.observed_pct, r.observed_lo, r.observed_hi)}{known} "
            f"| {_pct(r.predicted_pct)} ({r.error_pts:+.1f}) "
            f"| {_pct(r.wall_predicted_pct)} ({r.wall_error_pts:+.1f} [{r.wall_error_lo:.1f}, "
            f"{r.wall_error_hi:.1f}]){miss} | {_pct(r.wall_d1_predicted_pct)} "
            f"({r.wall_d1_error_pts:+.1f}){miss_d1} | {terms} |"
        )
    return "\n".join(lines)


def summary(table: pd.DataFrame) -> str:
    out = []
    predictions = (
        ("wall_error_pts", "whole-run model"),
        ("wall_d1_error_pts", "from depth 1 alone"),
        ("error_pts", "the post's per-step model"),
    )
    for col, name in predictions:
        err = table[col].abs()
        out.append(f"{name}: within {TARGET_PTS:.0f} point on {(err <= TARGET_PTS).sum()} of "
                   f"{len(table)} rows, largest miss {err.max():.1f} points")  # fmt: skip
    out.append(f"observed known to ±1 point: {int(table['observed_known'].sum())} of {len(table)}")
    return "\n".join(out)


def plot(table: pd.DataFrame, path: Path) -> None:
    """Predicted against observed, one panel per prediction; observed 95% intervals across, the
    error's 95% interval (over repeat pairs) up for the whole-run models."""
    panels = (
        ("predicted_pct", None, "the post's per-step model", "tab:blue"),
        ("wall_d1_predicted_pct", "wall_d1_error", "whole run, from depth 1 alone", "tab:orange"),
        ("wall_predicted_pct", "wall_error", "whole run, both runs' pieces", "tab:red"),
    )
    points = table[["observed_pct", "predicted_pct", "wall_predicted_pct", "wall_d1_predicted_pct"]]
    lim = [float(points.min().min()) - 3, float(points.max().max()) + 3]
    fig, axes = plt.subplots(1, 3, figsize=(16, 5.6), sharey=True)
    for ax, (col, err, label, color) in zip(axes, panels, strict=True):
        ax.plot(lim, lim, color="black", lw=0.8)
        ax.fill_between(lim, [v - TARGET_PTS for v in lim], [v + TARGET_PTS for v in lim],
                        color="0.85", label=f"±{TARGET_PTS:.0f} point")  # fmt: skip
        yerr = None
        if err:  # the error's interval, drawn around the prediction
            yerr = [
                table[f"{err}_hi"] - table[f"{err}_pts"],
                table[f"{err}_pts"] - table[f"{err}_lo"],
            ]
        xerr = [table["observed_pct"] - table["observed_lo"],
                table["observed_hi"] - table["observed_pct"]]  # fmt: skip
        ax.errorbar(table["observed_pct"], table[col], xerr=xerr, yerr=yerr, fmt="o", color=color,
                    ms=5, capsize=2, lw=0.8, label=label)  # fmt: skip
        for r in table.itertuples():
            short = r.name.replace("qwen3-", "").replace("smollm2-", "").replace("-detect", "-det")
            ax.annotate(f"{short}·{r.streams}", (r.observed_pct, getattr(r, col)), fontsize=6,
                        xytext=(3, 3), textcoords="offset points")  # fmt: skip
        xlabel = "observed: tokens/s depth 2 over depth 1 (%), 95% over repeat pairs"
        ax.set(xlim=lim, ylim=lim, title=label, xlabel=xlabel)
        ax.legend(loc="upper left", fontsize=8)
    axes[0].set_ylabel("predicted speedup (%)")
    fig.tight_layout()
    fig.savefig(path, dpi=130)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", type=Path, default=SWEEP)
    parser.add_argument("--plot", type=Path, help="write the predicted-vs-observed plot here (PNG)")
    parser.add_argument("--report", type=Path, help="write one HTML report of the whole sweep here")
    parser.add_argument("--n-boot", type=int, default=1000)
    args = parser.parse_args()
    table = sweep_table(args.sweep, args.n_boot)
    print(markdown(table))
    print("\n" + summary(table))
    if args.plot:
        plot(table, args.plot)
    if args.report:
        dirs = sorted(p for p in args.sweep.iterdir() if results_path(p))
        # Without export/: the trace and tables (~8 MB, all derived from the committed
        # results.json.gz) stay out of git; the page says how to write them.
        page = report_dirs(dirs, args.report, title=args.sweep.name, n_boot=args.n_boot,
                           export=False)  # fmt: skip
        print(f"{page}: {page.stat().st_size / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
