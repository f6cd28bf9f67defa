"""The TP study's figure and table (issue #27 item 2) from benchmarks/tp_sweep.py's JSON: per model
and stream count, the decode step at TP 1 and 2, depth 1 and 2, split into the GPU's forward, the
bubble (the GPU idle between steps, the larger of the ranks') and the rest of the period; and what
depth 2 buys at each TP size (tokens/s, paired by repeat: the depths ran back to back).

    python -m benchmarks.tp_study_report docs/measurements/2026-11-26/tp-study/tp-sweep-*.json \
        --png docs/tp-study.png --md docs/measurements/2026-11-26/tp-study/table.md
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from bubblelab.core.files import write_atomic  # noqa: E402
from tools.docs.tp_tables import flatten, summary  # noqa: E402


def plot(table: pd.DataFrame, path: Path, gpu: str) -> None:
    """A row per model, a panel per stream count: four bars (TP 1/2 x depth 1/2) of the step."""
    presets = list(dict.fromkeys(table.preset))
    streams = sorted(table.streams.unique())
    fig, axes = plt.subplots(
        len(presets), len(streams), figsize=(3.1 * len(streams), 3.0 * len(presets)), squeeze=False
    )
    labels = [(1, 1), (1, 2), (2, 1), (2, 2)]
    for i, preset in enumerate(presets):
        for j, s in enumerate(streams):
            ax = axes[i][j]
            cell = table[(table.preset == preset) & (table.streams == s)].set_index(["tp", "depth"])
            x = np.arange(len(labels))
            fwd, bub, step = (
                [cell[col].get(k, np.nan) for k in labels]
                for col in ("forward_ms", "bubble_ms", "step_ms_median")
            )
            rest = [max(st - f - b, 0) for st, f, b in zip(step, fwd, bub, strict=True)]
            ax.bar(x, fwd, color="tab:blue", label="forward (GPU)")
            ax.bar(x, bub, bottom=fwd, color="tab:red", label="bubble (most idle rank)")
            ax.bar(x, rest, bottom=np.add(fwd, bub), color="tab:gray", label="rest of the period")
            for tp in (1, 2):
                gain = cell["gain_pct"].get((tp, 2), np.nan)
                k = labels.index((tp, 2))
                ax.annotate(f"{gain:+.1f}%", (x[k], step[k]), ha="center", va="bottom",
                            fontsize="small")  # fmt: skip
            ax.set_xticks(x, [f"TP{tp}\nd{d}" for tp, d in labels], fontsize="small")
            ax.set_title(f"{preset}, {s} stream{'s' if s > 1 else ''}", fontsize="medium")
            if j == 0:
                ax.set_ylabel("decode step, ms (median)")
            ax.set_ylim(0, max(step) * 1.18)
    axes[0][0].legend(fontsize="x-small", loc="lower left")
    fig.suptitle(
        f"Tensor parallel 1 vs 2, depth 1 vs 2, on {gpu} (above the depth-2 bars: what depth 2 "
        "buys in tokens/s)",
        fontsize="medium",
    )
    fig.tight_layout()
    write_atomic(path, lambda partial: fig.savefig(partial, dpi=110, format="png"))
    plt.close(fig)


def markdown(table: pd.DataFrame, gpu: str) -> str:
    lines = [
        f"Decode at TP 1 and 2, depth 1 and 2, on {gpu}: medians over the repeats (each repeat ran "
        "every configuration back to back). forward: rank 0's GPU span a step; bubble: the GPU "
        "idle between steps, rank 0 / rank 1; handoff: rank 0's host time handing a step to the "
        "worker; depth 2 buys: tokens/s, median (min-max) of the per-repeat pairs.",
        "",
        "| model | streams | TP | depth | repeats | tok/s | step ms | x TP 1 | forward ms "
        "| bubble ms r0 / r1 | handoff us | depth 2 buys |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---|",
    ]
    for r in table.itertuples():
        r1 = f" / {r.bubble_rank1_ms:.3f}" if not np.isnan(r.bubble_rank1_ms) else ""
        gain = (
            f"{r.gain_pct:+.1f}% ({r.gain_min:+.1f} to {r.gain_max:+.1f})" if r.depth == 2 else ""
        )
        handoff = f"{r.handoff_us:.0f}" if not np.isnan(r.handoff_us) else "–"
        lines.append(
            f"| {r.preset} | {r.streams} | {r.tp} | {r.depth} | {r.repeats} | "
            f"{r.tokens_per_s:,.0f} | {r.step_ms_median:.3f} | {r.step_vs_tp1:.3f} | "
            f"{r.forward_ms:.3f} | {r.bubble_rank0_ms:.3f}{r1} | {handoff} | {gain} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sweeps", nargs="+", type=Path, help="benchmarks/tp_sweep.py JSON files")
    ap.add_argument("--png", type=Path, required=True)
    ap.add_argument("--md", type=Path, required=True)
    args = ap.parse_args()
    docs = [json.loads(p.read_text()) for p in args.sweeps]
    gpus = sorted({d["gpu"] for d in docs})
    gpu = f"2x {' / '.join(gpus)}"
    table = summary(flatten(docs))
    plot(table, args.png, gpu)
    write_atomic(args.md, markdown(table, gpu))
    print(markdown(table, gpu))


if __name__ == "__main__":
    main()
