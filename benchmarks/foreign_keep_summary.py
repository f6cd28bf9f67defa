"""Why a foreign prediction with `--step-ms` missed, from `benchmarks.foreign_predict --keep DIR`:
per row, the GPU's work a decode step and the step's period, as the trace read foreign saw them
(period - bubble under the foreign step rule) and as our own timeline saw the same nsys run and the
unprofiled runs, medians and means.

    python -m benchmarks.foreign_keep_summary --keep DIR --out SUMMARY.json

Two questions it answers: does the profiler lengthen the GPU's work (trace against unprofiled GPU
work), and how heavy is the unprofiled step's slow tail (mean against median period), which a
steady-state prediction from medians does not see while the measured wall sums it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from bubblelab.core.files import write_atomic
from bubblelab.runs.analysis import analyze_traces


def summary(keep: Path, output_len: float) -> list[dict]:
    rows = []
    for steps_file in sorted(keep.glob("*-d1-steps.json")):
        name = steps_file.name.removesuffix("-steps.json")
        trace = next(keep.glob(f"{name}.sqlite*"))
        report = analyze_traces([trace], domain="none", output_len=output_len)["runs"][0]
        gain = report.get("pipelining", {})
        steps = pd.read_json(steps_file)
        decode = steps[steps["kind"] == "decode"].assign(
            gpu_ms=lambda s: s["period_ms"] - s["bubble_ms"]
        )
        row: dict = {"row": name, "foreign_gpu_ms": gain.get("gpu_ms"),
                     "foreign_t_block_ms": gain.get("t_block_ms")}  # fmt: skip
        for source, part in decode.groupby("source"):
            row[source] = {
                "steps": int(len(part)),
                "gpu_median_ms": round(float(part["gpu_ms"].median()), 4),
                "gpu_mean_ms": round(float(part["gpu_ms"].mean()), 4),
                "period_median_ms": round(float(part["period_ms"].median()), 4),
                "period_mean_ms": round(float(part["period_ms"].mean()), 4),
            }
        unprofiled = row.get("timeline")
        if unprofiled and row["foreign_gpu_ms"]:
            row["trace_gpu_over_unprofiled_pct"] = round(
                100 * (row["foreign_gpu_ms"] / unprofiled["gpu_median_ms"] - 1), 2
            )
            row["unprofiled_tail_pct"] = round(
                100 * (unprofiled["period_mean_ms"] / unprofiled["period_median_ms"] - 1), 2
            )
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, required=True, help="foreign_predict's --keep folder")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--output-len", type=float, default=64.0, help="the workload's mean L")
    args = parser.parse_args()
    rows = summary(args.keep, args.output_len)
    write_atomic(args.out, json.dumps(rows, indent=1))
    for r in rows:
        print(f"{r['row']}: trace GPU {r.get('trace_gpu_over_unprofiled_pct', '-'):+}% "
              f"of unprofiled; unprofiled mean period {r.get('unprofiled_tail_pct', '-'):+}% "
              "over its median")  # fmt: skip


if __name__ == "__main__":
    main()
