"""Markdown table (depth 1 vs 2: period, forward, sampling, idle, tokens/s, speedup) from the JSON files
of benchmarks.depth_sweep (before it, benchmarks/gpu_engine.py: the same "runs").

    python -m tools.docs.engine_table docs/measurements/fused/engine-*.json
"""

from __future__ import annotations

import json
import sys

import numpy as np


def table(paths: list[str]) -> str:
    lines = [
        "| preset | streams | depth | period ms | forward ms | sampling ms | idle ms (median, p90) | tokens/s | speedup |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for path in paths:
        doc = json.load(open(path))
        runs = doc["runs"]
        for s in sorted({r["streams"] for r in runs}):
            tps = {}
            for d in (1, 2):
                rs = [r for r in runs if r["streams"] == s and r["depth"] == d]
                med = lambda k: float(np.median([r[k] for r in rs]))
                tps[d] = [r["tokens_per_s"] for r in rs]
                speed = ""
                if d == 2:
                    ratios = [b / a for a, b in zip(tps[1], tps[2])]
                    speed = f"{100 * (np.median(ratios) - 1):+.1f}% ({100 * (min(ratios) - 1):+.1f}..{100 * (max(ratios) - 1):+.1f})"
                lines.append(
                    f"| {doc['preset']} | {s} | {d} | {med('period_ms'):.3f} | {med('forward_ms'):.3f} | "
                    f"{med('sampling_ms'):.3f} | {med('bubble_ms'):.3f}, {med('bubble_p90_ms'):.3f} | "
                    f"{med('tokens_per_s'):.0f} | {speed} |"
                )
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(sys.argv[1:]))
