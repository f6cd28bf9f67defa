"""Why a foreign prediction with `--step-ms` missed, from `benchmarks.foreign_predict --keep DIR`:
per row, the GPU's work a decode step and the step's period, as the trace read foreign saw them
(period - bubble under the foreign step rule) and as our own timeline saw the same nsys run and the
unprofiled runs, medians and means.

    python -m benchmarks.foreign_keep_summary --keep DIR --out SUMMARY.json

Three questions it answers: does the profiler lengthen the GPU's work (trace against unprofiled GPU
work), how heavy is the unprofiled step's slow tail (mean against median period), which a
steady-state prediction from medians does not see while the measured wall sums it, and (`whole`)
what a whole-run prediction from the trace cannot see: depth 2's extra steps and hand-over, against
what the figure priced the hand-over at and how much longer the traced GPU work is than depth 2's
unprofiled (the profiler's share of both).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from bubblelab.core.files import write_atomic
from bubblelab.core.steady import steady_state
from bubblelab.costmodel.foreign_handover import handover
from bubblelab.runs.analysis import analyze_traces


def summary(keep: Path, output_len: float) -> list[dict]:
    rows = []
    for steps_file in sorted(keep.glob("*-d1-steps.json")):
        name = steps_file.name.removesuffix("-steps.json")
        trace = next(keep.glob(f"{name}.sqlite*"), None)  # left behind where it was too large
        gain = (
            analyze_traces([trace], domain="none", output_len=output_len)["runs"][0].get(
                "pipelining", {}
            )
            if trace is not None
            else {}
        )
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
        stem = name.removesuffix("-d1")
        if (keep / f"{stem}-steps.parquet").is_file():
            row["whole"] = whole_run_parts(keep, stem)
        rows.append(row)
    return rows


def whole_run_parts(keep: Path, stem: str) -> dict:
    """What a whole-run prediction from the depth-1 trace cannot see, from the unprofiled runs of
    both depths: how many more steps depth 2 took (its admission a tick later), and the GPU's
    hand-over between queued steps (depth 2's mean period less its mean GPU work); beside them the
    trace's steps read foreign, where kept."""
    steps = pd.read_parquet(keep / f"{stem}-steps.parquet")
    steps = steps.rename(columns={"depth_x": "depth"})  # kept at bf3f793: the run's depth twice
    steps = steps[steps["source"] != "nsys"]
    steps = steps.assign(gpu_ms=steps["forward_ms"] + steps["sampling_ms"].fillna(0))
    out: dict = {}
    for depth, part in steps.groupby("depth"):
        runs = part["run_id"].nunique()
        timed = part[part["period_ms"].notna()]
        out[f"depth{depth}"] = {
            "runs": int(runs),
            "steps_per_run": round(len(part) / runs, 2),
            "prefill_steps_per_run": round(int((part["kind"] == "prefill").sum()) / runs, 2),
            "mean_period_ms": round(float(timed["period_ms"].mean()), 4),
            "mean_gpu_ms": round(float(timed["gpu_ms"].mean()), 4),
        }
    if {"depth1", "depth2"} <= out.keys():
        d1, d2 = out["depth1"], out["depth2"]
        out["depth2_extra_steps_pct"] = round(
            100 * (d2["steps_per_run"] / d1["steps_per_run"] - 1), 2
        )
        out["handoff_ms"] = round(d2["mean_period_ms"] - d2["mean_gpu_ms"], 4)
    foreign = keep / f"{stem}-d1-foreign-steps.parquet"
    if foreign.is_file():
        trace = pd.read_parquet(foreign)
        timed = trace[trace["period_ms"].notna()]
        out["trace"] = {
            "steps": int(len(trace)),
            "prefill_like": int((trace["kind"] == "prefill").sum()),
            "mean_period_ms": round(float(timed["period_ms"].mean()), 4),
            "mean_gpu_ms": round(float((timed["period_ms"] - timed["bubble_ms"]).mean()), 4),
        }
        gaps = keep / f"{stem}-d1-launch-gaps.parquet"
        if gaps.is_file():  # what the figure prices the hand-over at, a step over the whole trace
            priced = handover(pd.read_parquet(gaps), steady_state(trace)["step"])
            added = priced.added_ms(timed).mean() if priced else 0.0
            out["trace"]["handover_priced_ms"] = round(float(added), 4)
        if "depth2" in out:  # the profiler's share: the trace's GPU work against depth 2's
            out["trace_gpu_over_depth2_pct"] = round(
                100 * (out["trace"]["mean_gpu_ms"] / out["depth2"]["mean_gpu_ms"] - 1), 2
            )
    return out


def explained(whole: dict, row: dict) -> dict:
    """A row's miss term by term, in points of speedup (negative: the figure low), from its
    summary's `whole` and its foreign-predict.json row: the traced GPU work over depth 2's, the
    priced hand-over over depth 2's, the replayed extra steps over depth 2's measured ones; each
    costs the pipelined time that share, so the speedup (1 + measured) times it."""
    d2, trace = whole["depth2"], whole["trace"]
    gain = 1 + row["observed_pct"] / 100
    shares = {
        "gpu_pts": (trace["mean_gpu_ms"] - d2["mean_gpu_ms"]) / d2["mean_period_ms"],
        "handover_pts": (trace.get("handover_priced_ms", 0.0) - whole["handoff_ms"])
        / d2["mean_period_ms"],
        "steps_pts": (row.get("extra_steps") or 0.0) - whole["depth2_extra_steps_pct"] / 100,
    }
    terms = {k: round(-100 * gain * v, 2) for k, v in shares.items()}
    return {
        **terms,
        "sum_pts": round(sum(terms.values()), 2),
        "paired_miss_pts": row.get("paired_miss_pts"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, required=True, help="foreign_predict's --keep folder")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--output-len", type=float, default=64.0, help="the workload's mean L")
    parser.add_argument("--predict", type=Path, help="the run's foreign-predict.json: each miss "
                        "term by term")  # fmt: skip
    args = parser.parse_args()
    rows = summary(args.keep, args.output_len)
    if args.predict:
        predicted = {
            f"{r['sweep']}-s{r['streams']}-d1": r for r in json.loads(args.predict.read_text())
        }
        for r in rows:
            if r["row"] in predicted and {"trace", "handoff_ms"} <= r.get("whole", {}).keys():
                r["explained"] = explained(r["whole"], predicted[r["row"]])
    write_atomic(args.out, json.dumps(rows, indent=1))
    for r in rows:
        whole = r.get("whole", {})
        print(f"{r['row']}: trace GPU {r.get('trace_gpu_over_unprofiled_pct', '-')}% "
              f"of unprofiled; unprofiled mean period {r.get('unprofiled_tail_pct', '-')}% "
              f"over its median; depth 2 {whole.get('depth2_extra_steps_pct', '-')}% more steps, "
              f"hand-over {whole.get('handoff_ms', '-')} ms (priced from the trace "
              f"{whole.get('trace', {}).get('handover_priced_ms', '-')} ms); the trace's GPU work "
              f"{whole.get('trace_gpu_over_depth2_pct', '-')}% over depth 2's")  # fmt: skip
        if "explained" in r:
            print(f"  miss by term: {r['explained']}")


if __name__ == "__main__":
    main()
