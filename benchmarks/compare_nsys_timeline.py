"""Two instruments, one run: nsys (catalog.duckdb) against the engine's in-process timeline
(timeline.duckdb) for every run of a run-and-profile directory made under nsys (both record the same
steps).

Per run (steady state): forward, sampling, period and bubble medians and their relative difference;
the bubble per step split by time over the host phase running at each instant, by both; the host's
wake-up after the GPU finished (nsys only: profiling/sql/wake_latency.sql); the timeline's clock
corrections. Per stream count: the depth-2 forward over the depth-1 forward, by both.

    python -m benchmarks.compare_nsys_timeline RUN_DIR [--out comparison.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from bubblelab.core.files import write_atomic
from bubblelab.profiling import analysis
from bubblelab.profiling.catalog import connect
from bubblelab.runs.record import load_record, records_in, tag_of

PHASES = ("forward_ms", "sampling_ms", "period_ms", "bubble_ms")


def _by_time(con, run_id: str, steady: pd.DataFrame) -> dict:
    table = analysis.attribution(con, run_id, steady)
    return {r.phase: round(r.time_ms / len(steady), 4) for r in table.itertuples() if r.time_ms}


def compare(run_dir: Path) -> dict:
    nsys, timeline = connect(run_dir / "catalog.duckdb"), connect(run_dir / "timeline.duckdb")
    t_runs = analysis.runs(timeline).set_index(["streams", "depth"])
    summaries = {
        (s["streams"], s["depth"]): s
        for s in (
            load_record(p)["summary"]
            for p in records_in(run_dir / "runs" / "nsys")
            if tag_of(p).endswith("-r0")
        )
    }
    rows = []
    for run in analysis.runs(nsys).itertuples():
        if run.source != "nsys":  # the catalog holds the unprofiled runs too
            continue
        t_id = t_runs.loc[(run.streams, run.depth)].run_id
        a = analysis.steady_state(analysis.per_step(nsys, run.run_id))
        b = analysis.steady_state(analysis.per_step(timeline, t_id))
        row: dict = {
            "streams": int(run.streams),
            "depth": int(run.depth),
            "steps": [len(a), len(b)],
        }
        for col in PHASES:
            x, y = float(a[col].median()), float(b[col].median())
            row[col] = {"nsys": x, "timeline": y, "rel_diff": (y - x) / x if x else None}
        row["by_time_ms_per_step"] = {
            "nsys": _by_time(nsys, run.run_id, a),
            "timeline": _by_time(timeline, t_id, b),
        }
        wake = analysis.wake_latency(nsys, run.run_id)
        wake = wake[wake.step.isin(a.step)].wake_us
        row["wake_us"] = {
            "median": float(wake.median()) if len(wake) else None,
            "p90": float(wake.quantile(0.9)) if len(wake) else None,
            "n": len(wake),
        }
        s = summaries.get((run.streams, run.depth), {})
        row["clock_anchor_us"] = {k: s.get(f"clock_anchor_us_{k}") for k in ("median", "max")}
        rows.append(row)
    ratios = []
    for streams in sorted({r["streams"] for r in rows}):
        d = {r["depth"]: r["forward_ms"] for r in rows if r["streams"] == streams}
        if {1, 2} <= set(d):
            ratios.append(
                {"streams": streams, **{k: d[2][k] / d[1][k] for k in ("nsys", "timeline")}}
            )
    return {"runs": rows, "forward_d2_over_d1": ratios}


def print_summary(result: dict) -> None:
    print(
        f"{'run':>8} {'fwd':>7} {'samp':>7} {'period':>7} {'bubble':>7} {'wake us':>8}  "
        "by time (nsys | timeline)"
    )
    for r in result["runs"]:
        diffs = " ".join(f"{100 * (r[c]['rel_diff'] or 0):+6.1f}%" for c in PHASES)
        top = {
            k: sorted(v.items(), key=lambda kv: -kv[1])[:3]
            for k, v in r["by_time_ms_per_step"].items()
        }
        print(
            f"s{r['streams']:>3}-d{r['depth']} {diffs} {r['wake_us']['median'] or 0:8.1f}  "
            f"{top['nsys']} | {top['timeline']}"
        )
    for r in result["forward_d2_over_d1"]:
        print(
            f"forward d2/d1 at {r['streams']} streams: nsys {r['nsys']:.4f}, "
            f"timeline {r['timeline']:.4f}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    result = compare(args.run_dir)
    if args.out:
        write_atomic(args.out, json.dumps(result, indent=1))
    print_summary(result)


if __name__ == "__main__":
    main()
