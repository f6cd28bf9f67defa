"""What one `Phases.range` costs the engine loop, with NVTX on and off (no profiler attached).

Run with `-s` to see the figures; docs: profiling/README.md records them.
"""

from __future__ import annotations

import time

from bubblelab.core.timeline import Timeline
from bubblelab.engine.phases import Phases

RANGES = 20_000


def range_cost_ns(phases: Phases, repeats: int = 5) -> float:
    """Best-of-`repeats` nanoseconds per `with phases.range(...)` (a nested pair counts as two
    ranges)."""
    best = float("inf")
    for _ in range(repeats):
        if phases.timeline is not None:
            phases.timeline.clear()
        start = time.perf_counter_ns()
        for step in range(RANGES // 2):
            with phases.range("launch", step):
                with phases.range("forward", step):
                    pass
        best = min(best, (time.perf_counter_ns() - start) / RANGES)
    return best


def test_nvtx_range_cost(capsys):
    costs = {
        "off": range_cost_ns(Phases()),
        "timeline": range_cost_ns(Phases(timeline=Timeline())),
        "nvtx": range_cost_ns(Phases(nvtx_enabled=True)),
        "nvtx+timeline": range_cost_ns(Phases(nvtx_enabled=True, timeline=Timeline())),
    }
    with capsys.disabled():
        print("\nns per Phases.range: " + ", ".join(f"{k} {v:.0f}" for k, v in costs.items()))
    # NVTX without a profiler is a few hundred ns: against a ~1 ms decode step and ~11 ranges, < 1 %
    assert costs["nvtx"] - costs["off"] < 5_000
    assert costs["off"] < costs["nvtx+timeline"]
