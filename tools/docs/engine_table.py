"""Markdown table (depth 1 vs 2: period, forward, sampling, idle, tokens/s, speedup) from the JSON
files of benchmarks.depth_sweep (before it, benchmarks/gpu_engine.py: the same "runs").

    python -m tools.docs.engine_table docs/measurements/fused/engine-*.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

HEADER = (
    "| preset | streams | depth | period ms | forward ms | sampling ms | idle ms (median, p90) "
    "| tokens/s | speedup |\n|---|---|---|---|---|---|---|---|---|"
)


def median(rows: list[dict], key: str) -> float:
    return float(np.median([r[key] for r in rows]))


def speedup(depth1: list[float], depth2: list[float]) -> str:
    """Median and range of the per-repeat tokens/s ratios, depth 2 over depth 1, in percent."""
    ratios = [b / a for a, b in zip(depth1, depth2, strict=False)]
    lo, mid, hi = (100 * (r - 1) for r in (min(ratios), float(np.median(ratios)), max(ratios)))
    return f"{mid:+.1f}% ({lo:+.1f}..{hi:+.1f})"


def table(paths: list[str]) -> str:
    lines = [HEADER]
    for path in paths:
        doc = json.loads(Path(path).read_text())
        runs = doc["runs"]
        for s in sorted({r["streams"] for r in runs}):
            tps: dict[int, list[float]] = {}
            for d in (1, 2):
                rs = [r for r in runs if r["streams"] == s and r["depth"] == d]
                tps[d] = [r["tokens_per_s"] for r in rs]
                speed = speedup(tps[1], tps[2]) if d == 2 else ""
                lines.append(
                    f"| {doc['preset']} | {s} | {d} | {median(rs, 'period_ms'):.3f} | "
                    f"{median(rs, 'forward_ms'):.3f} | {median(rs, 'sampling_ms'):.3f} | "
                    f"{median(rs, 'bubble_ms'):.3f}, {median(rs, 'bubble_p90_ms'):.3f} | "
                    f"{median(rs, 'tokens_per_s'):.0f} | {speed} |"
                )
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(sys.argv[1:]))
