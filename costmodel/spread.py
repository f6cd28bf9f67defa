"""Where a configuration's run-to-run noise comes from: the GPU's work, or the host's speed.

A sweep's repeats run their own requests (a seed each), so their walls differ by the workload as
well as by noise. Each run's *median decode step* moves little with the workload, and splitting it
by phase says whose the noise is. On the GPU machines measured (docs/measurements.md §7) the
answer was the same every time: the GPU's forward holds to ~0.5% over the repeats, while every
host phase of a run is slower by one common factor in some runs (up to 2.9x), and depth 1's step,
which waits for the host, follows that factor; depth 2 hides it. `source_lines` says so in a
sentence for each configuration whose speedup the repeats did not pin down.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..core.steady import steady_state
from ..core.words import counted
from .observed import cv_pct

HOST = ("plan_ms", "launch_ms", "finalize_ms")
PHASES = ("period_ms", "forward_ms", *HOST)
FOLLOWS = 0.8  # a correlation this high: depth 1's step follows its host


def run_medians(steps: pd.DataFrame, run_ids) -> pd.DataFrame:
    """Per run (index: run_id): the median of each phase over its steady steps (core.steady: the
    prediction table's step_cv_* read the same), and its host factor: the median over HOST of each
    phase's median against that phase's median over the runs (1 = a typical run, 2 = its host
    work took twice as long)."""
    steady = steady_state(steps[steps["run_id"].isin(list(run_ids))])
    medians = steady.groupby("run_id")[[p for p in PHASES if p in steady]].median()
    host = [h for h in HOST if h in medians and medians[h].notna().all() and medians[h].gt(0).all()]
    factor = pd.concat([medians[h] / medians[h].median() for h in host], axis=1).median(axis=1)
    return medians.assign(host_factor=factor if host else np.nan)


def spread(steps: pd.DataFrame, runs_block, runs_pipe) -> dict:
    """A configuration's spread over its repeats, each depth: the CV (%) of each run's median step
    and forward, the range of its median launch (ms), and at depth 1 how closely each run's median
    step follows its host factor (correlation)."""
    out: dict = {}
    for depth, ids in ((1, runs_block), (2, runs_pipe)):
        m = run_medians(steps, ids)
        out[f"step_cv_d{depth}_pct"] = cv_pct(m["period_ms"])
        forward = m["forward_ms"] if "forward_ms" in m else pd.Series(dtype=float)
        launch = m["launch_ms"] if "launch_ms" in m else pd.Series(dtype=float)
        out[f"forward_cv_d{depth}_pct"] = cv_pct(forward)
        out[f"launch_ms_d{depth}"] = (launch.min(), launch.max()) if len(launch) else None
    m1 = run_medians(steps, runs_block)
    follows = m1[["period_ms", "host_factor"]].dropna()
    out["d1_step_host_r"] = (
        float(np.corrcoef(follows["period_ms"], follows["host_factor"])[0, 1])
        if len(follows) > 2 and follows.std().gt(0).all()
        else np.nan
    )
    return out


def source_lines(table: pd.DataFrame, steps: pd.DataFrame) -> list[str]:
    """One sentence per configuration whose observed speedup is not known to ±1 point, from 3
    pairs on: whose noise it is. Rows need the prediction table's runs_block / runs_pipe."""
    lines = []
    for r in table.to_dict("records"):
        if r.get("observed_known") or int(r.get("pairs", 0)) < 3:
            continue
        s = spread(steps, str(r["runs_block"]).split(","), str(r["runs_pipe"]).split(","))
        d1, d2 = s["step_cv_d1_pct"], s["step_cv_d2_pct"]
        said = (
            f"{r['label']}: not known to ±1 point after {counted(r['pairs'], 'pair')}; "
            f"each run's median step varies {d1:.1f}% over the repeats at depth 1, "
            f"{d2:.1f}% at depth 2"
        )
        launch = s["launch_ms_d1"]
        if (
            np.isfinite(s["d1_step_host_r"]) and s["d1_step_host_r"] >= FOLLOWS
            and launch is not None and s["forward_cv_d1_pct"] < d1 / 2
        ):  # fmt: skip
            said += (
                f". Depth 1's follows its host (correlation {s['d1_step_host_r']:.2f}; its median "
                f"launch {launch[0]:.3f}-{launch[1]:.3f} ms, the GPU's forward varying "
                f"{s['forward_cv_d1_pct']:.1f}%): this host's speed changes from run to run, "
                "which depth 1 exposes and depth 2 hides; more pairs, or a steadier host, pin it"
            )
        lines.append(said)
    return lines
