"""The Photon post's published numbers as data (moondream2 on an RTX 3090 and a B200).

`BLOG_TABLE` is the post's table "Now put real numbers in it"; `BLOG_STEP_PARTS` is its table of
pipelined steady-state medians (forward, sampling, period), which gives the step cost as a function
of batch size that the batched zombie tax needs. Percentages are the post's, in percent.
"""

from __future__ import annotations

import pandas as pd

from ..core.words import counted
from .model import StepCost, pct, speedup, speedup_bounds, zombie_tax

BLOG_TABLE = pd.DataFrame(
    [
        ("3090", 1, 5.44, 5.10, 104, 5.7, 6.5),
        ("3090", 8, 7.52, 6.97, 113, 7.6, 7.8),
        ("3090", 32, 11.74, 10.52, 113, 11.1, 11.6),
        ("B200", 1, 3.11, 2.63, 115, 17.2, 17.6),
        ("B200", 8, 4.04, 3.30, 115, 22.2, 21.9),
        ("B200", 32, 5.55, 3.98, 104, 39.1, 35.4),
    ],
    columns=["gpu", "streams", "blocking_ms", "pipelined_ms", "L", "predicted_pct", "observed_pct"],
)

BLOG_STEP_PARTS = pd.DataFrame(
    [
        ("3090", 1, 4.87, 0.20, 5.10),
        ("3090", 8, 6.66, 0.27, 6.97),
        ("3090", 32, 10.24, 0.26, 10.52),
        ("B200", 1, 2.45, 0.14, 2.63),
        ("B200", 8, 3.12, 0.14, 3.30),
        ("B200", 32, 3.80, 0.14, 3.98),
    ],
    columns=["gpu", "streams", "forward_ms", "sampling_ms", "period_ms"],
)


def blog_table() -> pd.DataFrame:
    """A copy of the post's prediction table, safe to modify."""
    return BLOG_TABLE.copy()


def predict_blog() -> pd.DataFrame:
    """The post's table re-predicted by this model, with its z bounds and the post's own
    prediction."""
    rows = []
    for r in BLOG_TABLE.itertuples():
        parts = BLOG_STEP_PARTS[BLOG_STEP_PARTS["gpu"] == r.gpu]
        cost = StepCost.from_points(parts["streams"], parts["forward_ms"] + parts["sampling_ms"])
        z = zombie_tax(r.L, r.streams, cost)
        lo, hi = speedup_bounds(r.blocking_ms, r.pipelined_ms, r.L)
        gpu = float(
            parts.loc[parts["streams"] == r.streams, ["forward_ms", "sampling_ms"]]
            .sum(axis=1)
            .iloc[0]
        )
        predicted = pct(speedup(r.blocking_ms, r.pipelined_ms, z))
        rows.append(
            dict(
                label=f"{r.gpu} · {counted(r.streams, 'stream')}",
                device=r.gpu,
                streams=r.streams,
                blocking_ms=r.blocking_ms,
                pipelined_ms=r.pipelined_ms,
                L=r.L,
                z=z,
                gpu_ms=gpu,
                host_ms=r.blocking_ms - gpu,
                predicted_pct=predicted,
                predicted_lo=pct(lo),
                predicted_hi=pct(hi),
                published_pct=r.predicted_pct,
                observed_pct=r.observed_pct,
                error_pts=r.observed_pct - predicted,
            )
        )
    return pd.DataFrame(rows)
