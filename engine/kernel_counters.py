"""Zeroed int32 counters for kernels whose last program to finish a piece of work completes it: a
split-K GEMM tile's sum (triton_gemm.py), a split decode attention's merge (attention/
triton_decode.py). Such a kernel leaves its counters zero again."""

from __future__ import annotations

import torch

_kept: dict[tuple[torch.device, str], list[torch.Tensor]] = {}


def counters(device: torch.device, count: int, owner: str) -> torch.Tensor:
    """At least `count` zeroed counters for this kind of kernel on this device. One stream
    computes a device's step, so kernels of one owner never run at once; owners never share. A
    larger set replaces a smaller one, which stays allocated: graphs captured with it still point
    there."""
    kept = _kept.setdefault((device, owner), [])
    if not kept or kept[-1].numel() < count:
        kept.append(torch.zeros(max(count, 1 << 16), dtype=torch.int32, device=device))
    return kept[-1]
