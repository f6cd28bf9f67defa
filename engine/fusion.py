"""Which of the one-row step's cross-kernel fusions the engine launches.

A one-row decode step is ~10 kernels a layer, each a few microseconds, and every boundary between
two of them costs a wait for the first to drain even with PDL. Two boundaries can fold away, both
into the one-row GEMV (engine/fused_gemv.py):

- `norm`: the add + RMSNorm before the QKV and gate|up projections becomes the GEMV's prologue:
  each program reads the row (a few KB from L2) instead of waiting for a norm kernel.
- `silu`: SiLU * mul becomes the gate|up GEMV's epilogue: a program owns matching gate and up rows.

Each applies only where its kernels run (CUDA, Triton) and the GEMM table picks the GEMV form.
Fused and unfused compute the same roundings; only fp32 sums may run in another order (the logits
came out bit for bit equal on an H200).

**Off by default: measured slower where it matters.** With PDL the norm and SiLU kernels already
start under the GEMV before them, so little of a boundary was left to save, while the fused GEMV
(with tiles tuned for the plain one) does more per K step. One H200, 512 tokens, paired
(benchmarks/pdl_ab.py --fusions, docs/engine-speed.md): qwen3-4b one row 2.549 ms unfused, 2.640
with `norm`, 2.604 with `silu`, 2.671 with both; qwen3-8b 4.091, 4.044, 4.039, 4.114.
BUBBLELAB_FUSE=none (default), all or a comma list chooses; `using(names)` does in-process.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

FUSIONS = ("norm", "silu")
_override: frozenset[str] | None = None  # set by using()


def parse(text: str) -> frozenset[str]:
    """'all', 'none' or a comma list of FUSIONS -> the set it names."""
    return parse_set(text, FUSIONS, "fusion")


def parse_set(text: str, names: tuple[str, ...], what: str) -> frozenset[str]:
    """'all', 'none' (or '') or a comma list of `names` -> the set it names; an unknown name is a
    ValueError naming it as a `what`. BUBBLELAB_FUSE's and BUBBLELAB_PDL_EARLY's one grammar."""
    text = text.strip()
    if text == "all":
        return frozenset(names)
    if text in ("none", ""):
        return frozenset()
    chosen = frozenset(n.strip() for n in text.split(","))
    unknown = sorted(chosen - set(names))
    if unknown:
        raise ValueError(f"unknown {what} {unknown[0]!r}: all, none or a list of {names}")
    return chosen


def enabled(name: str) -> bool:
    """Whether kernels launched now fold this boundary away."""
    if name not in FUSIONS:
        raise ValueError(f"unknown fusion {name!r}")
    chosen = _override if _override is not None else parse(os.environ.get("BUBBLELAB_FUSE", "none"))
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
