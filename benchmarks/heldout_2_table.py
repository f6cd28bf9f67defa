"""The second held-out set's published table, from each GPU's `benchmarks.heldout_2` output.

    python -m benchmarks.heldout_2_table --run H100=DIR_A --run H200=DIR_B \\
        --out TABLE.md --json ROWS.json

Every row of every GPU, none left out: the observed speedup with its 95% interval, whether it is
known to ±1 point (and if not, why the repeats stopped), each depth's CV of the median step and of
wall per token, the
forecast from depth 1 alone with its interval, the miss, and for a miss over 1 point the measured
depth-2 pieces that make it (costmodel.headline.explanation). With two GPUs, each one's speedup
forecast from the other's depth-1 runs too (costmodel.crossgpu). Beside each forecast, the same with
the hand-over carried in from the other configurations' depth-2 runs (costmodel.carried). The goal
line counts the rows known to ±1 point and forecast within 1 point; a row not known counts as not
met.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

from bubblelab.core.files import write_atomic
from bubblelab.costmodel.carried import handoffs, with_carried_handoff
from bubblelab.costmodel.crossgpu import predict_across
from bubblelab.costmodel.headline import explanation, miss_text, pct_text, pts_text
from bubblelab.costmodel.predict import predict_runs
from bubblelab.report.summary import with_repeat_stops
from bubblelab.runs.rundir import Results, read_results, results_path
from tools.docs.costmodel_at_commit import model_commit

SET = Path(__file__).with_name("heldout_2.json")
MISS_PTS = 1.0


def finished(root: Path, sweep: dict) -> bool:
    """Did a GPU's output finish this sweep (its results.json written)?"""
    return results_path(root / sweep["name"]) is not None


def load(held_out: dict, runs: dict[str, Path]) -> dict[tuple[str, str], Results]:
    """(GPU, sweep name) -> its results, for every sweep each GPU's output finished (one cut
    before its results.json is named by `missing`)."""
    return {
        (gpu, sweep["name"]): read_results(root / sweep["name"])
        for gpu, root in runs.items()
        for sweep in held_out["sweeps"]
        if finished(root, sweep)
    }


def missing(held_out: dict, runs: dict[str, Path]) -> list[str]:
    """'GPU: sweep' for every sweep of the set that a GPU's output did not finish."""
    return [
        f"{gpu}: {sweep['name']} ({', '.join(sweep['ids'].values())})"
        for gpu, root in runs.items()
        for sweep in held_out["sweeps"]
        if not finished(root, sweep)
    ]


def rows(held_out: dict, results: dict[tuple[str, str], Results], n_boot: int) -> pd.DataFrame:
    ids = {s["name"]: s["ids"] for s in held_out["sweeps"]}
    order = {s["name"]: i for i, s in enumerate(held_out["sweeps"])}
    out = []
    measured = {  # each sweep's hand-overs, carried to the same GPU's other sweeps
        key: handoffs(r.runs, r.steps, r.ranks if not r.ranks.empty else None)
        for key, r in results.items()
    }
    for (gpu, name), r in results.items():
        # tensor parallel: the GPU pieces taken across every rank (costmodel.tensor_parallel)
        ranks = r.ranks if not r.ranks.empty else None
        table = predict_runs(r.runs, r.steps, r.requests, ranks=ranks, n_boot=n_boot)
        table = with_repeat_stops(table, r.provenance)
        elsewhere = [
            (machine, ms)
            for (g, other), each in measured.items()
            if g == gpu and other != name
            for _, machine, ms in each
        ]
        table = with_carried_handoff(table, r.runs, r.steps, r.requests, ranks, elsewhere,
                                     n_boot=n_boot)  # fmt: skip
        named = [row_id(ids[name], name, s) for s in table["streams"]]
        out.append(table.assign(gpu=gpu, sweep=name, id=named, order=order[name]))
    table = pd.concat(out, ignore_index=True)
    return table.sort_values(["order", "streams", "gpu"], kind="stable").drop(columns="order")


def row_id(ids: dict, name: str, streams: int) -> str:
    """The set's id of a configuration; a stream count the set does not name (--tiny shrinks
    them) gets its sweep's name."""
    return ids.get(str(streams), f"{name} s{streams}")


def across(results: dict[tuple[str, str], Results], ids: dict, n_boot: int) -> pd.DataFrame:
    """Each GPU's speedup forecast from every other GPU's depth-1 runs of the same sweep."""
    out = []
    for (source, name), a in results.items():
        for (target, other), b in results.items():
            if other != name or target == source:
                continue
            table = predict_across((a.runs, a.steps, a.requests), (b.runs, b.steps, b.requests),
                                   n_boot=n_boot)  # fmt: skip
            named = [row_id(ids[name], name, s) for s in table.get("streams", [])]
            out.append(table.assign(source=source, target=target, id=named))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()


def cv_text(r: dict) -> str:
    """Each run's median step over the repeats (the noise), then wall per token (a repeat's own
    requests each: the workload's spread in it too); tables made before the first: the second."""
    walls = f"{r['wall_cv_d1_pct']:.1f}% · {r['wall_cv_d2_pct']:.1f}%"
    step1, step2 = r.get("step_cv_d1_pct", np.nan), r.get("step_cv_d2_pct", np.nan)
    if not (np.isfinite(step1) and np.isfinite(step2)):
        return f"({walls})"
    return f"{step1:.1f}% · {step2:.1f}% ({walls})"


def inside(table: pd.DataFrame, prefix: str) -> int:
    """Rows whose miss's 95% interval over resampled pairs lies within ±MISS_PTS. Each pair's
    forecast reads that pair's depth-1 run, so where the host's speed moves the speedup from pair to
    pair (docs/measurements.md §7) the forecast moves with it, and the miss can be known when the
    speedup is not."""
    lo, hi = f"{prefix}_error_lo", f"{prefix}_error_hi"
    if lo not in table:
        return 0
    return int(((table[lo] >= -MISS_PTS) & (table[hi] <= MISS_PTS)).sum())


def markdown(table: pd.DataFrame, crossed: pd.DataFrame, model: str, absent: list[str]) -> str:
    met = table["observed_known"] & (table["wall_d1_error_pts"].abs() <= MISS_PTS)
    carried = table["observed_known"] & (table["wall_d1h_error_pts"].abs() <= MISS_PTS)
    lines = [
        f"Model: {model}. Goal: every observed speedup known to ±1 point and forecast from depth 1 "
        f"within {MISS_PTS:.0f} point: met on {int(met.sum())} of {len(table)} rows; "
        f"known on {int(table['observed_known'].sum())}; largest miss "
        f"{table['wall_d1_error_pts'].abs().max():.1f} points. With the hand-over carried in from "
        f"the other configurations' depth-2 runs (costmodel.carried): met on {int(carried.sum())}; "
        f"largest miss {table['wall_d1h_error_pts'].abs().max():.1f} points. The miss known pair "
        f"by pair (its 95% interval inside ±{MISS_PTS:.0f} point, whether or not the speedup "
        f"itself is known): {inside(table, 'wall_d1')} of {len(table)} from depth 1 alone, "
        f"{inside(table, 'wall_d1h')} with the hand-over carried in.",
        "",
        "| id | GPU | configuration | pairs (why they stopped) "
        "| CV of the median step d1 · d2 (of wall per token) "
        "| observed [95%] | forecast from depth 1 [95%] | miss [95%] "
        "| what makes the miss (depth-2 pieces) | with the hand-over carried in: forecast, miss "
        "| hand-over, us: depth 1's probe · depth 2's steps |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    if absent:  # said before the rows, so a partial table is never read as the whole set
        lines[1:1] = ["", f"Not finished, so not in the table: {'; '.join(absent)}."]
    for r in table.to_dict("records"):
        cells = [
            r["id"], r["gpu"], r["label"], f"{r['pairs']} ({r['repeat_stop'] or '–'})",
            cv_text(r), observed(r),
            pct_text(r["wall_d1_predicted_pct"], r["wall_d1_predicted_lo"],
                     r["wall_d1_predicted_hi"], r["wall_d1_predicted_known"]),
            miss_text(r),
            explanation(r) if abs(r["wall_d1_error_pts"]) > MISS_PTS else "",
            carried_text(r),
            handoff_text(r),
        ]  # fmt: skip
        lines.append(f"| {' | '.join(map(str, cells))} |")
    if len(crossed):
        lines += [
            "",
            "Across GPUs: each GPU's speedup forecast from the other's depth-1 runs "
            "(costmodel.crossgpu: GPU span and host tick ratios read off both depth-1 runs).",
            "",
            "| id | forecast for | from | GPU · host ratio | forecast [95%] | observed [95%] "
            "| miss |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in crossed.sort_values(["id", "target"]).to_dict("records"):
            cells = [
                r["id"], r["target"], r["source"], f"{r['gpu_ratio']:.2f} · {r['host_ratio']:.2f}",
                pct_text(r["across_predicted_pct"], r["across_predicted_lo"],
                         r["across_predicted_hi"]),
                observed(r), f"{r['across_error_pts']:+.1f} pts",
            ]  # fmt: skip
            lines.append(f"| {' | '.join(map(str, cells))} |")
    return "\n".join(lines) + "\n"


def carried_text(r: dict) -> str:
    if pd.isna(r["wall_d1h_predicted_pct"]):
        return "– (no other configuration ran depth 2)"
    miss = pts_text(r["wall_d1h_error_pts"], r.get("wall_d1h_error_lo", np.nan),
                    r.get("wall_d1h_error_hi", np.nan))  # fmt: skip
    return f"{r['wall_d1h_predicted_pct']:+.1f}%, {miss} ({1e3 * r['carried_handoff_ms']:.1f} us)"


def handoff_text(r: dict) -> str:
    """The hand-over the forecast costed in (the depth-1 runs' probe; – for runs made before it)
    beside what depth 2's queued steps measured."""
    probe, steps = r.get("handoff_probe_ms", np.nan), r.get("handoff_d2_ms", np.nan)
    return " · ".join("–" if pd.isna(v) else f"{1e3 * v:.1f}" for v in (probe, steps))


def observed(r: dict) -> str:
    return pct_text(r["observed_pct"], r["observed_lo"], r["observed_hi"], r["observed_known"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", action="append", required=True, metavar="GPU=DIR",
                        help="a GPU's benchmarks.heldout_2 output (once per GPU)")  # fmt: skip
    parser.add_argument("--set", type=Path, default=SET)
    parser.add_argument("--out", type=Path, help="the markdown table (default: stdout)")
    parser.add_argument("--json", type=Path, help="every row, as JSON")
    parser.add_argument("--n-boot", type=int, default=1000)
    args = parser.parse_args()
    held_out = json.loads(args.set.read_text())
    runs = dict(arg.split("=", 1) for arg in args.run)
    roots = {gpu: Path(d) for gpu, d in runs.items()}
    results = load(held_out, roots)
    table = rows(held_out, results, args.n_boot)
    crossed = across(results, {s["name"]: s["ids"] for s in held_out["sweeps"]}, args.n_boot)
    text = markdown(table, crossed, model_commit(held_out), missing(held_out, roots))
    if args.out:
        write_atomic(args.out, text)
    else:
        print(text)
    if args.json:
        doc = {
            "rows": json.loads(table.to_json(orient="records")),
            "across": json.loads(crossed.to_json(orient="records")) if len(crossed) else [],
        }
        write_atomic(args.json, json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
