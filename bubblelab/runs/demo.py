"""A run directory of simulated runs (costmodel.simulate): what the report looks like without a
GPU."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bubblelab.costmodel.simulate import LoopCosts, idle_gaps, simulate_run
from bubblelab.runs.rundir import write_results


def write_demo_run_dir(
    run_dir: Path | str,
    streams: tuple[int, ...] = (1, 8),
    requests_per_stream: int = 4,
    output_len: int = 48,
    costs: LoopCosts | None = None,
    seed: int = 0,
) -> Path:
    """A run directory of simulated depth-1 / depth-2 pairs: what the report looks like without a
    GPU."""
    runs, steps, timelines, gaps, attribution = [], [], [], [], []
    for s in streams:
        for depth in (1, 2):
            r = simulate_run(
                depth,
                streams=s,
                requests=requests_per_stream * s,
                output_len=output_len,
                costs=costs,
                seed=seed + s,
            )
            g, a = idle_gaps(r["timeline"])
            runs.append(r["run"])
            steps.append(r["steps"])
            timelines.append(r["timeline"])
            gaps.append(g)
            attribution.append(a)
    provenance = {
        "command": f"write_demo_run_dir(streams={tuple(streams)})",
        "note": "simulated loop (costmodel.simulate), not a measurement",
    }
    return write_results(
        run_dir,
        pd.DataFrame(runs),
        pd.concat(steps, ignore_index=True),
        pd.concat(attribution, ignore_index=True),
        pd.concat(gaps, ignore_index=True),
        provenance,
        pd.concat(timelines, ignore_index=True),
    )
