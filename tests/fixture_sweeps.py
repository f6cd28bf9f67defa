"""A simulated sweep (costmodel.simulate) as the contract's frames, and as Results, for the tests
of what the cost model and the page make of paired and one-depth runs."""

from __future__ import annotations

import pandas as pd

from bubblelab.costmodel.simulate import simulate_run
from bubblelab.runs.rundir import Results

FRAMES = ("runs", "steps", "requests", "timeline")


def simulated_sweep(repeats: int, streams: tuple[int, ...] = (2, 8)) -> dict[str, pd.DataFrame]:
    """Each stream count's configuration, `repeats` pairs of depth-1 and depth-2 runs on the same
    requests (a seed a repeat)."""
    frames: dict[str, list] = {key: [] for key in FRAMES}
    for n in streams:
        for repeat in range(repeats):
            for depth in (1, 2):
                r = simulate_run(depth, streams=n, requests=3 * n, output_len=24,
                                 seed=10 * n + repeat, repeat=repeat,
                                 run_id=f"s{n}-r{repeat}-d{depth}")  # fmt: skip
                frames["runs"].append(pd.DataFrame([r["run"]]))
                for key in FRAMES[1:]:
                    frames[key].append(r[key])
    return {k: pd.concat(v, ignore_index=True) for k, v in frames.items()}


def as_results(frames: dict[str, pd.DataFrame], provenance: dict | None = None) -> Results:
    """simulated_sweep's frames (or a part of them) as a run directory's Results."""
    empty = pd.DataFrame()
    return Results(runs=frames["runs"], steps=frames["steps"], attribution=empty, gaps=empty,
                   provenance=provenance or {}, timeline=frames["timeline"],
                   requests=frames["requests"], ranks=empty, rank_attribution=empty)  # fmt: skip
