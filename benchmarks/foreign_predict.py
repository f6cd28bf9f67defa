"""Predict from a blocking trace alone, checked (issue #24 item 5): our engine's depth-1 nsys trace
of a configuration read as a foreign engine's (no NVTX phases, no results.json), what pipelining
would buy by costmodel.foreign, against the depth-2 speedup the same sweep measured unprofiled.

    python -m benchmarks.foreign_predict --sweeps DIR [--sweeps DIR2 ...] --out OUT

DIR: a run-and-profile sweep whose nsys pass profiled depth 1 (benchmarks.heldout_2's sweeps do), or
a folder of such sweeps. The trace is read with --domain none, as `bubblelab analyze TRACE --domain
none --output-len L` reads it; L is the workload's configured mean output length (what a user knows
of their own workload before a run), never the run's. The measured side is the sweep's observed
speedup (median of interleaved repeat pairs, 95% interval), which the prediction never reads. Each
row also predicts from the same trace given the engine's own unprofiled step times, as a user reads
them off their engine without the profiler: the median decode step of the sweep's unprofiled depth-1
runs (`analyze --step-ms`) and their mean step over whole runs (`--mean-step-ms`). The workload's
requests stop at their caps (ignore_eos) and the engine launches no step past a cap, which a user
knows of their own engine and workload: so no zombie tax (`analyze --no-zombies`). Its shape
(streams, requests, prompt and mean output length) is given too (`analyze --streams`): the whole-run
figure replays it for the steps depth 2 adds. Each prediction comes twice: a steady step (medians)
and over the whole trace (every step summed, `whole_run`), the one to set beside a measured wall
clock and, with the engine's step times, the one item 5 is judged on. Writes
OUT/foreign-predict.json (every row, with the prediction's assumptions) and OUT/foreign-predict.md
(the table). With --keep DIR, each row's depth-1 trace and the per-step tables of its depth-1 runs
go to DIR too, to explain a miss on another machine.

The host's speed on the GPU machines moves between runs a minute apart, and the measured speedup
with it (docs/foreign-traces.md), so item 5's figure is also checked pair by pair (`paired_*`): for
each unprofiled pair, the whole-run figure from the trace given that pair's own depth-1 mean step,
against that pair's speedup; the median miss, with the median's 95% interval over the pairs. That
checks the model at the host each pair ran on, where the pooled figure meets a median of pairs
drawn from several host speeds.
    python -m benchmarks.foreign_predict --from-keep KEEP --rows OUT/foreign-predict.json --out OUT2
does it again from a run's kept tables (--keep), on any machine.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

from bubblelab.core.errors import BubblelabError
from bubblelab.core.files import write_atomic
from bubblelab.core.steady import steady_state
from bubblelab.costmodel.foreign import pipelining_gain
from bubblelab.costmodel.model import pct
from bubblelab.costmodel.observed import LEVEL, median_interval, pair_ratios, pair_repeats
from bubblelab.costmodel.predict import predict_runs
from bubblelab.profiling import analysis, foreign
from bubblelab.profiling.catalog import connect
from bubblelab.runs.analysis import analyze_traces
from bubblelab.runs.rundir import read_results
from bubblelab.runs.workload import WorkloadSpec

GOAL_PTS = 2.0  # the bar for a foreign trace: within 2 points of the measured speedup
PAIRED_BOOT = 200  # the paired check reads only the whole-run point figure: few resamples suffice


def sweeps_under(root: Path) -> list[Path]:
    """root itself when it is a sweep (its sweep.json), else the sweeps one level below it."""
    if (root / "sweep.json").is_file():
        return [root]
    return sorted(p.parent for p in root.glob("*/sweep.json"))


def trace_of(sweep: Path, recorded: str) -> Path:
    """The trace a run recorded, found again where the sweep's folder is now (it may have moved)."""
    path = Path(recorded)
    return path if path.is_file() else sweep / "traces" / path.name


def rows(sweep: Path, n_boot: int = 1000, keep: Path | None = None) -> list[dict]:
    """A row per depth-1 nsys run of the sweep; with `keep`, its trace and the depth-1 runs' steps
    (keep_evidence) go there too."""
    spec = json.loads((sweep / "sweep.json").read_text())
    output_len = float(spec["output_len_mean"])
    r = read_results(sweep)
    measured = predict_runs(r.runs, r.steps, r.requests, n_boot=n_boot).set_index("streams")
    out = []
    profiled = r.runs[(r.runs["depth"] == 1) & (r.runs["source"] == "nsys")]
    for _, run in profiled.sort_values("streams").iterrows():
        trace = trace_of(sweep, run["trace_path"])
        # The workload's shape, as its user knows it: depth 2's extra steps replayed from it.
        shape = WorkloadSpec(int(run["streams"]), int(run["requests"]), output_len,
                             prompt_len=int(run["prompt_len"]))  # fmt: skip
        con = connect(None)  # the trace ingested once: each reading below asks the same catalog
        report = analyze_traces(
            [trace], catalog=con, domain="none", output_len=output_len, zombies=False,
            workload=shape,
        )  # fmt: skip
        found = report["runs"][0]
        gain = found.get("pipelining", {})
        m = measured.loc[int(run["streams"])]
        row = {
            "sweep": sweep.name,
            "model": run["model"],
            "device": run["device"],
            "streams": int(run["streams"]),
            "output_len": output_len,
            "trace": trace.name,
            "step_rule": found["steps_found"]["rule"],
            "sure": bool(found["steps_found"]["sure"]),
            "foreign_pct": gain.get("speedup_pct"),
            "foreign_interval_pct": gain.get("interval_pct"),
            "not_predicted": gain.get("not_predicted"),
            "bound": gain.get("bound"),  # set where the trace's graphs were traced node by node
            "observed_pct": float(m["observed_pct"]),
            "observed_interval_pct": [float(m["observed_lo"]), float(m["observed_hi"])],
            "observed_known": bool(m["observed_known"]),
            "pairs": int(m["pairs"]),
            "timeline_d1_pct": float(m["wall_d1_predicted_pct"]),
            "t_block_ms": gain.get("t_block_ms"),
            "t_pipe_ms": gain.get("t_pipe_ms"),
            "gpu_ms": gain.get("gpu_ms"),
            "handover_ms": gain.get("handover_ms"),
            "host_ms": gain.get("host_ms"),
            "assumptions": gain.get("assumptions"),
        }
        if row["foreign_pct"] is not None:
            row["miss_pts"] = row["foreign_pct"] - row["observed_pct"]
            row["within_goal"] = abs(row["miss_pts"]) <= GOAL_PTS
            _whole(row, "whole", gain)
        # The same trace with the engine's own step time, as a user reads it off an unprofiled
        # run of their engine: the sweep's unprofiled depth-1 runs at these streams.
        step = unprofiled_step_ms(r, int(run["streams"]))
        mean_step = unprofiled_mean_step_ms(r, int(run["streams"]))
        if step is not None:
            given = analyze_traces(
                (), catalog=con, domain="none", output_len=output_len, step_ms=step,
                zombies=False, mean_step_ms=mean_step, workload=shape,
            )  # fmt: skip
            gain = given["runs"][0].get("pipelining", {})
            row["given_step_ms"] = step
            row["given_mean_step_ms"] = mean_step
            row["extra_steps"] = gain.get("whole_run", {}).get("extra_steps")
            row["given_pct"] = gain.get("speedup_pct")
            row["given_not_predicted"] = gain.get("not_predicted")
            if row["given_pct"] is not None:
                row["given_miss_pts"] = row["given_pct"] - row["observed_pct"]
                row["given_within_goal"] = abs(row["given_miss_pts"]) <= GOAL_PTS
                _whole(row, "given_whole", gain)
        foreign_steps = analysis.per_step(con, found["run_id"])
        gaps = foreign.launch_handovers(con, found["run_id"], foreign_steps)
        at = r.runs[(r.runs["streams"] == run["streams"]) & (r.runs["source"] != "nsys")]
        extra = row.get("extra_steps") or 0.0
        row.update(paired(foreign_steps, at, r.steps, output_len, extra, gaps))
        out.append(row)
        if keep is not None:
            keep_evidence(keep, sweep, trace, foreign_steps, r, int(run["streams"]), gaps)
    return out


def paired(
    foreign_steps: pd.DataFrame,
    runs: pd.DataFrame,
    steps: pd.DataFrame,
    output_len: float,
    extra_steps: float,
    launch_gaps: pd.DataFrame | None = None,
) -> dict:
    """Item 5's whole-run figure pair by pair: for each unprofiled pair in `runs` (one stream
    count, both depths), the figure from the trace's per-step table given the pair's depth-1 run's
    own mean step, less the pair's measured speedup; their median and its 95% interval."""
    misses, predicted = [], []
    for d1, d2 in pair_repeats(runs[runs["depth"] == 1], runs[runs["depth"] == 2]):
        mean_step = steps.loc[steps["run_id"] == d1["run_id"], "period_ms"].dropna().mean()
        try:
            gain = pipelining_gain(
                foreign_steps, output_len=output_len, zombies=False, mean_step_ms=float(mean_step),
                extra_steps=extra_steps, n_boot=PAIRED_BOOT, launch_gaps=launch_gaps,
            )["whole_run"]  # fmt: skip
        except BubblelabError:  # a run shorter than the trace's GPU work: no figure for it
            continue
        ratio = pair_ratios(
            d1["generated_tokens"], d1["wall_s"], d2["generated_tokens"], d2["wall_s"]
        )
        predicted.append(gain["speedup_pct"])
        misses.append(gain["speedup_pct"] - pct(ratio))
    if not misses:
        return {}
    lo, hi, coverage = median_interval(misses)
    miss = float(np.median(misses))
    return {
        "paired_pairs": len(misses),
        "paired_pct": float(np.median(predicted)),
        "paired_miss_pts": miss,
        "paired_miss_interval_pts": [lo, hi],
        "paired_miss_coverage": coverage,
        "paired_within_goal": abs(miss) <= GOAL_PTS,
        # The whole interval inside the goal, at 95%: the miss is known to be within it.
        "paired_known_within_goal": bool(coverage >= LEVEL and -GOAL_PTS <= lo and hi <= GOAL_PTS),
    }


def from_keep(keep: Path, table: list[dict]) -> list[dict]:
    """Item 5's figures again for the rows of a foreign-predict.json, from the tables its run
    kept (--keep): each row's depth-1 trace as read foreign (its per-step table, and its launch
    gaps where kept: the hand-over), the whole-run figure given the row's pooled mean step
    (`given_whole_*`, against the pooled measurement as recorded) and pair by pair against the
    steps of every run at its streams."""
    out = []
    for row in table:
        stem = keep / f"{row['sweep']}-s{row['streams']}"
        both = pd.read_parquet(f"{stem}-steps.parquet")
        if "depth" not in both:  # kept by runs before 2026-11-30's run 5: named twice there
            both = both.rename(columns={"depth_x": "depth"})
        both = both[both["source"] != "nsys"]
        runs = both.groupby("run_id", as_index=False).first()
        foreign_steps = pd.read_parquet(f"{stem}-d1-foreign-steps.parquet")
        kept_gaps = Path(f"{stem}-d1-launch-gaps.parquet")  # kept since the hand-over was priced
        gaps = pd.read_parquet(kept_gaps) if kept_gaps.is_file() else None
        extra = row.get("extra_steps") or 0.0
        again = {**row}
        if row.get("given_mean_step_ms") is not None:
            gain = pipelining_gain(
                foreign_steps, output_len=row["output_len"], zombies=False,
                mean_step_ms=row["given_mean_step_ms"], extra_steps=extra, launch_gaps=gaps,
            )  # fmt: skip
            again["handover_ms"] = gain["handover_ms"]
            _whole(again, "given_whole", gain)
        out.append({**again, **paired(foreign_steps, runs, both, row["output_len"], extra, gaps)})
    return out


def _whole(row: dict, key: str, gain: dict) -> None:
    """The whole-trace prediction of `gain` into row[key + "_pct"], its interval and its miss."""
    whole = gain["whole_run"]
    row[f"{key}_pct"] = whole["speedup_pct"]
    row[f"{key}_interval_pct"] = whole["interval_pct"]
    row[f"{key}_miss_pts"] = whole["speedup_pct"] - row["observed_pct"]
    row[f"{key}_within_goal"] = abs(row[f"{key}_miss_pts"]) <= GOAL_PTS


def keep_evidence(
    keep: Path,
    sweep: Path,
    trace: Path,
    foreign_steps: pd.DataFrame,
    results,
    streams: int,
    launch_gaps: pd.DataFrame | None = None,
) -> None:
    """What a miss is explained from, small enough to bring back from the GPU machine: the depth-1
    trace as read, its per-step table read foreign and its launch gaps (the hand-over's
    evidence), the per-step table of every depth-1 run at
    `streams` (unprofiled and under nsys, as results.json holds them; JSON, for
    foreign_keep_summary), and every run at `streams` of both depths with its steps (parquet), to
    set the trace's steps beside the unprofiled runs'."""
    keep.mkdir(parents=True, exist_ok=True)
    stem = f"{sweep.name}-s{streams}"
    name = f"{stem}-d1.sqlite" + (".gz" if trace.suffix == ".gz" else "")
    write_atomic(keep / name, trace.read_bytes())
    runs = results.runs
    picked = runs[(runs["depth"] == 1) & (runs["streams"] == streams)][["run_id", "source"]]
    columns = ["run_id", "step", "kind", "forward_ms", "sampling_ms", "bubble_ms", "period_ms"]
    steps = results.steps.merge(picked, on="run_id")[["source", *columns]]
    write_atomic(keep / f"{stem}-d1-steps.json", steps.to_json(orient="records"))
    meta = ["run_id", "depth", "source", "repeat", "process", "wall_s", "generated_tokens"]
    at = runs[runs["streams"] == streams][[c for c in meta if c in runs]]
    at = at[[c for c in at if c == "run_id" or c not in results.steps]]  # steps have their depth
    both = results.steps.merge(at, on="run_id")
    write_atomic(keep / f"{stem}-steps.parquet", both.to_parquet)
    write_atomic(keep / f"{stem}-d1-foreign-steps.parquet", foreign_steps.to_parquet)
    if launch_gaps is not None:
        write_atomic(keep / f"{stem}-d1-launch-gaps.parquet", launch_gaps.to_parquet)


def unprofiled_step_ms(results, streams: int) -> float | None:
    """The median steady decode-step period of the sweep's unprofiled depth-1 runs at `streams`
    (its own timeline: what the engine's clock says a step takes without the profiler)."""
    runs = results.runs
    picked = runs[(runs["depth"] == 1) & (runs["source"] != "nsys") & (runs["streams"] == streams)]
    steps = results.steps[results.steps["run_id"].isin(picked["run_id"])]
    steady = steady_state(steps) if len(steps) else steps
    return float(steady["period_ms"].median()) if len(steady) else None


def _cell(r: dict, pct: str, miss: str, why: str) -> str:
    """A prediction and its miss, or why there is none."""
    if r.get(miss) is None:
        return r.get(why) or "-"
    return f"{r[pct]:+.1f}% ({r[miss]:+.1f})"


def unprofiled_mean_step_ms(results, streams: int) -> float | None:
    """The mean period of every step of the sweep's unprofiled depth-1 runs at `streams`, prefills
    and the ramp-down too (their wall clock over their steps, as a user times a whole run)."""
    runs = results.runs
    picked = runs[(runs["depth"] == 1) & (runs["source"] != "nsys") & (runs["streams"] == streams)]
    period = results.steps[results.steps["run_id"].isin(picked["run_id"])]["period_ms"].dropna()
    return float(period.mean()) if len(period) else None


def markdown(table: list[dict]) -> str:
    lines = [
        "| model · GPU | streams | L | measured (95% interval, pairs) | trace alone: steady step "
        "| trace alone: whole run | step time given: steady step | **step time given: whole run** "
        "| paired: miss [95%] (pairs) | from the timeline (depth 1) | step rule |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in table:
        lo, hi = r["observed_interval_pct"]
        known = "" if r["observed_known"] else " ?"
        lines.append(
            f"| {r['model']} · {r['device']} | {r['streams']} | {r['output_len']:g} "
            f"| {r['observed_pct']:+.1f}% [{lo:+.1f}, {hi:+.1f}]{known} ({r['pairs']}) "
            f"| {_cell(r, 'foreign_pct', 'miss_pts', 'not_predicted')} "
            f"| {_cell(r, 'whole_pct', 'whole_miss_pts', 'not_predicted')} "
            f"| {_cell(r, 'given_pct', 'given_miss_pts', 'given_not_predicted')} "
            f"| **{_cell(r, 'given_whole_pct', 'given_whole_miss_pts', 'given_not_predicted')}** "
            f"| {_paired_cell(r)} "
            f"| {r['timeline_d1_pct']:+.1f}% "
            f"| {r['step_rule']}{'' if r['sure'] else ' (unsure)'} |"
        )
    keys = (
        "within_goal",
        "whole_within_goal",
        "given_within_goal",
        "given_whole_within_goal",
        "paired_within_goal",
        "paired_known_within_goal",
    )
    count = {k: sum(bool(r.get(k)) for r in table) for k in keys}
    lines.append("")
    lines.append(
        f"Within {GOAL_PTS:g} points of the measured speedup (misses in points in brackets): from "
        f"the depth-1 trace alone {count['within_goal']} of {len(table)} (steady step) and "
        f"{count['whole_within_goal']} (whole run); with the engine's own unprofiled step time "
        f"(`analyze --step-ms`) {count['given_within_goal']} and "
        f"**{count['given_whole_within_goal']}** (whole run: item 5's figure). No zombie tax: the "
        "requests stop at their caps. '?': the measured speedup is not known to ±1 point. "
        f"Pair by pair (each pair's own depth-1 mean step given, the median miss): "
        f"{count['paired_within_goal']} within {GOAL_PTS:g} points, "
        f"{count['paired_known_within_goal']} with the whole 95% interval inside ±{GOAL_PTS:g}."
    )
    return "\n".join(lines) + "\n"


def _paired_cell(r: dict) -> str:
    if r.get("paired_miss_pts") is None:
        return "-"
    lo, hi = r["paired_miss_interval_pts"]
    mark = "" if r["paired_miss_coverage"] >= LEVEL else "*"
    return f"{r['paired_miss_pts']:+.1f} [{lo:+.1f}, {hi:+.1f}]{mark} ({r['paired_pairs']})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=Path, action="append", default=[])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--from-keep", type=Path, help="a run's --keep folder: the paired check again"
    )
    parser.add_argument(
        "--rows", type=Path, help="with --from-keep: that run's foreign-predict.json"
    )
    parser.add_argument("--n-boot", type=int, default=1000)
    parser.add_argument(
        "--keep", type=Path, help="copy each row's trace and its depth-1 runs' steps here"
    )
    args = parser.parse_args()
    if bool(args.from_keep) != bool(args.rows) or bool(args.sweeps) == bool(args.from_keep):
        parser.error("give --sweeps, or --from-keep with --rows")
    table = from_keep(args.from_keep, json.loads(args.rows.read_text())) if args.from_keep else []
    for root in args.sweeps:
        for sweep in sweeps_under(root):
            print(f"== {sweep}", flush=True)
            try:
                table += rows(sweep, args.n_boot, args.keep)
            except Exception as e:  # one broken sweep does not hide the others
                print(f"   skipped: {type(e).__name__}: {e}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    write_atomic(args.out / "foreign-predict.json", json.dumps(table, indent=1))
    text = markdown(table)
    write_atomic(args.out / "foreign-predict.md", text)
    print(text, flush=True)


if __name__ == "__main__":
    main()
