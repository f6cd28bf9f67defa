"""The cost model against the H200 sweep: the post-style table, the plot, and one report for the
sweep.

    .venv/bin/python -m tools.docs.h200_costmodel_table             # markdown table on stdout
    .venv/bin/python -m tools.docs.h200_costmodel_table --plot docs/h200-costmodel.png \\
        --report reports/h200-sweep/report.html

Reads docs/measurements/h200-sweep/<name>/results.json.gz (one directory per model or workload). Per
configuration: the per-step model (the post's T_block / T_pipe × (1 − z), steady-state medians) and
the whole-run model (costmodel.wholerun, from the depth-1 step sequence), against the observed
tokens/s ratio.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib
import pandas as pd

from bubblelab.costmodel.predict import predict_runs
from bubblelab.report.report import render_report
from bubblelab.runs.rundir import merge_results, read_results

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)

SWEEP = Path("docs/measurements/h200-sweep")
TARGET_PTS = 1.0  # the accuracy the model is held to, in points of speedup


def prefills(results, run_ids) -> tuple[float, float]:
    """Prefill steps per run, and their mean host launch time (ms): the host-bound part of the
    wall."""
    steps = results.steps[results.steps["run_id"].isin(run_ids)]
    prefill = steps[steps["kind"] == "prefill"]
    return len(prefill) / len(run_ids), float(prefill["launch_ms"].mean())


def sweep_table(sweep: Path, n_boot: int) -> tuple[pd.DataFrame, dict]:
    rows, named = [], {}
    for run_dir in sorted(p for p in sweep.iterdir() if p.is_dir()):
        results = named[run_dir.name] = read_results(run_dir)
        table = predict_runs(results.runs, results.steps, n_boot=n_boot)
        for r in table.itertuples():
            blocking, pipelined = r.runs_block.split(","), r.runs_pipe.split(",")
            (n1, launch1), (n2, launch2) = prefills(results, blocking), prefills(results, pipelined)
            rows.append(
                dict(
                    name=run_dir.name,
                    **r._asdict(),
                    prefills_d1=n1,
                    prefills_d2=n2,
                    prefill_launch_d1=launch1,
                    prefill_launch_d2=launch2,
                )
            )
    table = pd.DataFrame(rows).drop(columns="Index")
    table["step_error_pts"] = table["observed_pct"] - table["predicted_pct"]
    table["wall_error_pts"] = table["observed_pct"] - table["wall_predicted_pct"]
    return table, named


def markdown(table: pd.DataFrame) -> str:
    head = (
        "| run · streams | blocking ms | pipelined ms | L | predicted per-step [95%] "
        "| predicted whole-run [repeats] | observed [95%] | error per-step | error whole-run "
        "| prefills per run d1 / d2 | prefill launch ms d1 / d2 |"
    )
    lines = [head, "|" + "---|" * head.count(" | ") + "---|"]
    for r in table.itertuples():
        miss = "" if abs(r.wall_error_pts) <= TARGET_PTS else " ✗"
        lines.append(
            f"| {r.name} · {r.streams} | {r.blocking_ms:.2f} | {r.pipelined_ms:.2f} | {r.L:.0f} "
            f"| {r.predicted_pct:+.1f}% [{r.predicted_lo:.1f}, {r.predicted_hi:.1f}] "
            f"| {r.wall_predicted_pct:+.1f}% "
            f"[{r.wall_predicted_min:.1f}, {r.wall_predicted_max:.1f}] "
            f"| {r.observed_pct:+.1f}% [{r.observed_lo:.1f}, {r.observed_hi:.1f}] "
            f"| {r.step_error_pts:+.1f} | {r.wall_error_pts:+.1f}{miss} "
            f"| {r.prefills_d1:.0f} / {r.prefills_d2:.0f} "
            f"| {r.prefill_launch_d1:.1f} / {r.prefill_launch_d2:.1f} |"
        )
    return "\n".join(lines)


def plot(table: pd.DataFrame, path: Path) -> None:
    """Predicted vs observed, one panel per model: observed 95% intervals across, the model's spread
    up."""
    models = (
        (
            "predicted_pct",
            "predicted_lo",
            "predicted_hi",
            "per-step model (the post's), 95%",
            "tab:blue",
        ),
        (
            "wall_predicted_pct",
            "wall_predicted_min",
            "wall_predicted_max",
            "whole-run model, range over repeats",
            "tab:red",
        ),
    )
    points = table[["observed_pct", "predicted_pct", "wall_predicted_pct"]]
    lim = [min(points.min()) - 3, max(points.max()) + 3]
    fig, axes = plt.subplots(1, 2, figsize=(12, 6), sharey=True)
    for ax, (col, lo, hi, label, color) in zip(axes, models, strict=True):
        ax.plot(lim, lim, color="black", lw=0.8)
        ax.fill_between(
            lim,
            [v - TARGET_PTS for v in lim],
            [v + TARGET_PTS for v in lim],
            color="0.85",
            label=f"±{TARGET_PTS:.0f} point",
        )
        ax.errorbar(
            table["observed_pct"],
            table[col],
            xerr=[
                table["observed_pct"] - table["observed_lo"],
                table["observed_hi"] - table["observed_pct"],
            ],
            yerr=[table[col] - table[lo], table[hi] - table[col]],
            fmt="o",
            color=color,
            ms=5,
            capsize=2,
            lw=0.8,
            label=label,
        )
        for r in table.itertuples():
            short = r.name.replace("qwen3-", "").replace("smollm2-", "").replace("-detect", "-det")
            ax.annotate(
                f"{short}·{r.streams}",
                (r.observed_pct, getattr(r, col)),
                fontsize=6,
                xytext=(3, 3),
                textcoords="offset points",
            )
        ax.set(
            xlim=lim,
            ylim=lim,
            xlabel="observed: tokens/s depth 2 over depth 1 (%), 95% over repeats",
            title=label,
        )
        ax.legend(loc="upper left", fontsize=8)
    axes[0].set_ylabel("predicted speedup (%)")
    fig.suptitle("Cost model vs the H200 sweep (in-process timeline, 3 repeats a side)")
    fig.tight_layout()
    fig.savefig(path, dpi=130)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", type=Path, default=SWEEP)
    parser.add_argument("--plot", type=Path, help="write the predicted-vs-observed plot here (PNG)")
    parser.add_argument("--report", type=Path, help="write one HTML report of the whole sweep here")
    parser.add_argument("--n-boot", type=int, default=1000)
    args = parser.parse_args()
    table, named = sweep_table(args.sweep, args.n_boot)
    print(markdown(table))
    inside = (table["wall_error_pts"].abs() <= TARGET_PTS).sum()
    print(
        f"\nwhole-run model within {TARGET_PTS:.0f} point: {inside} of {len(table)} rows; "
        f"per-step model: {(table['step_error_pts'].abs() <= TARGET_PTS).sum()} of {len(table)}"
    )
    if args.plot:
        plot(table, args.plot)
    if args.report:
        args.report.parent.mkdir(parents=True, exist_ok=True)
        html = render_report(merge_results(named), title="H200 sweep", n_boot=args.n_boot)
        args.report.write_text(html, encoding="utf-8")
        print(f"{args.report}: {len(html.encode()) / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
