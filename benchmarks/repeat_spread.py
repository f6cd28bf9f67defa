"""What differs between a configuration's repeats in a sweep, once the workload is taken out.

A sweep's repeats are paired on a workload seed each (runs.sweep: repeat r uses seed + r), so two
repeats of one depth run different requests: their walls per token differ by the workload as well
as by noise, and the sweep's "CV of wall per token" holds both. Per (configuration, depth) this
gives, over the repeats, the spread of each run's median steady step (the full-batch step, which
the workload moves little) and of each host phase's median (costmodel.spread, which the report
and `bubblelab predict` sum up in a sentence):

    python -m benchmarks.repeat_spread SWEEP_DIR [SWEEP_DIR ...] --out SPREAD.json

A host whose speed changes from one run to the next shows at depth 1 as every host phase slower by
the same factor in the slow runs (`host_factor`), with the GPU's forward unchanged; depth 2 hides
it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

from bubblelab.core.files import write_atomic
from bubblelab.costmodel.observed import cv_pct
from bubblelab.costmodel.spread import PHASES, run_medians
from bubblelab.runs.rundir import load_document, results_path


def _results(sweep: Path) -> Path:
    path = results_path(sweep)
    if path is None:
        raise SystemExit(f"no results.json[.gz] in {sweep}")
    return path


def spread(results: Path) -> list[dict]:
    """One row per (model, tensor parallel, streams, depth) of one sweep's results.json."""
    data = load_document(results)
    runs = pd.DataFrame(data["runs"])
    if "profiled" in runs:
        runs = runs[runs["profiled"].eq(False)]
    steps = pd.DataFrame(data["steps"])
    out = []
    keys = ["model", "tensor_parallel", "streams", "depth"]
    for key, group in runs.groupby(keys, sort=True):
        m = run_medians(steps, group["run_id"])
        group = group.merge(m, left_on="run_id", right_index=True)
        follows = len(group) > 2 and group["host_factor"].std() > 0
        r = np.corrcoef(group["period_ms"], group["host_factor"])[0, 1] if follows else np.nan
        row = dict(zip(keys, (str(key[0]), *(int(k) for k in key[1:])), strict=True))
        row |= {
            "runs": int(len(group)),
            "wall_per_token_cv_pct": cv_pct(group["wall_s"] / group["generated_tokens"]),
            "generated_tokens_cv_pct": cv_pct(group["generated_tokens"].astype(float)),
            "median_step_cv_pct": {p: cv_pct(group[p]) for p in PHASES},
            "median_step_ms": {p: [float(group[p].min()), float(group[p].median()),
                                   float(group[p].max())] for p in PHASES},  # fmt: skip
            "host_factor": [float(group["host_factor"].min()), float(group["host_factor"].max())],
            "period_vs_host_factor_r": float(r),
        }  # fmt: skip
        out.append(row)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sweeps", nargs="+", type=Path, help="sweep directories holding results.json")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    rows = [{"sweep": d.name, **row} for d in args.sweeps for row in spread(_results(d))]
    write_atomic(args.out, json.dumps(rows, indent=1) + "\n")
    for r in rows:
        cv = r["median_step_cv_pct"]
        print(f"{r['sweep']:>22} {r['streams']:>4} d{r['depth']}: wall/token CV "
              f"{r['wall_per_token_cv_pct']:4.1f}%, median step CV {cv['period_ms']:4.1f}% "
              f"(forward {cv['forward_ms']:.1f}%, launch {cv['launch_ms']:.1f}%), host factor "
              f"{r['host_factor'][0]:.2f}-{r['host_factor'][1]:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
