"""Which of the one-row step's cross-kernel fusions the engine launches.

A one-row decode step is ~10 kernels a layer, each a few microseconds, and every boundary between
two of them costs a wait for the first to drain even with PDL. Two boundaries can fold away, both
into the one-row GEMV (engine/fused_gemv.py):

- `norm`: the add + RMSNorm before the QKV and gate|up projections becomes the GEMV's prologue:
  each program reads the row (a few KB from L2) instead of waiting for a norm kernel.
- `silu`: SiLU * mul becomes the gate|up GEMV's epilogue: a program owns matching gate and up rows.

Each applies only where its kernels run (CUDA, Triton) and the GEMM table picks the GEMV form.
Fused and unfused compute the same roundings; only fp32 sums may run in another order.
BUBBLELAB_FUSE=all (default), none, or a comma list chooses (A/B measurements); `using(names)`
does the same in-process.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

FUSIONS = ("norm", "silu")
_override: frozenset[str] | None = None  # set by using()


def parse(text: str) -> frozenset[str]:
    """'all', 'none' or a comma list of FUSIONS -> the set it names."""
    text = text.strip()
    if text == "all":
        return frozenset(FUSIONS)
    if text in ("none", ""):
        return frozenset()
    names = frozenset(n.strip() for n in text.split(","))
    unknown = sorted(names - set(FUSIONS))
    if unknown:
        raise ValueError(f"unknown fusion {unknown[0]!r}: all, none or a list of {FUSIONS}")
    return names


def enabled(name: str) -> bool:
    """Whether kernels launched now fold this boundary away."""
    if name not in FUSIONS:
        raise ValueError(f"unknown fusion {name!r}")
    chosen = _override if _override is not None else parse(os.environ.get("BUBBLELAB_FUSE", "all"))
    return name in chosen


@contextlib.contextmanager
def using(names: str) -> Iterator[None]:
    """Kernels launched (or graphs captured) inside use these fusions ('all', 'none' or a list)."""
    global _override
    before, _override = _override, parse(names)
    try:
        yield
    finally:
        _override = before
