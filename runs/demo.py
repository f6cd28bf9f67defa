"""A run directory of simulated runs (costmodel.simulate): what the report looks like without a
GPU."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from ..core.errors import BubblelabError
from ..costmodel.simulate import LoopCosts, idle_gaps, simulate_run
from .rundir import RESULTS_FILE, write_results
from .state import OURS, holds_run

SIMULATED = "simulated"  # the provenance key that marks a demo's results.json


def is_simulated(run_dir: Path) -> bool:
    """The directory holds only a demo's files: results.json marked simulated (and a report)."""
    present = {name for name in OURS if (run_dir / name).exists()}
    if not present <= {RESULTS_FILE, "report.html"}:
        return False
    if RESULTS_FILE not in present:
        return True
    try:
        doc = json.loads((run_dir / RESULTS_FILE).read_text())
        return isinstance(doc, dict) and doc.get("provenance", {}).get(SIMULATED) is True
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        return False


def write_demo_run_dir(
    run_dir: Path | str,
    streams: tuple[int, ...] = (1, 8),
    requests_per_stream: int = 4,
    output_len: int = 48,
    costs: LoopCosts | None = None,
    seed: int = 0,
) -> Path:
    """A run directory of simulated depth-1 / depth-2 pairs: what the report looks like without a
    GPU. Refuses a directory that holds measured results: simulated data never replaces them."""
    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise BubblelabError(f"{run_dir} is a file, not a run directory")
    if holds_run(run_dir) and not is_simulated(run_dir):
        raise BubblelabError(
            f"{run_dir} holds measured results: --demo writes simulated runs only into a new "
            "directory (or over an earlier demo)"
        )
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
        SIMULATED: True,
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
