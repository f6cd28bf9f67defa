"""Programmatic dependent launch (PDL, Hopper and later) for the engine's own Triton kernels.

A decode step at small batch is ~10 kernels a layer, most of them a few microseconds long, and
inside a CUDA graph each still waits for the one before it to drain before its blocks are even
scheduled. Launched with PDL, a kernel's blocks may start while the kernel before it on the stream
is still running: they read what no kernel writes (a GEMM's weights), then `gdc_wait` until every
earlier kernel has finished and its writes are visible, then let the next kernel start
(`gdc_launch_dependents`). Everything that reads an activation or writes anything comes after the
wait, so a step computes exactly what it computes without PDL, in the same order (a GPU test
compares the two bit for bit).

The kernels take a `PDL` constexpr and `launch_options(device)` gives their launch its two
keywords. A kernel without PDL (cuBLAS, Inductor's) simply ends the overlap there.
BUBBLELAB_PDL=0 turns it off (A/B measurements); `disabled()` does the same inside one process.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator

import torch
import triton
import triton.language as tl

try:  # Triton >= 3.5; no-ops elsewhere, and never reached with PDL off
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

    HAS_GDC = True
except ImportError:  # pragma: no cover - older Triton
    HAS_GDC = False

    @triton.jit
    def gdc_wait():
        pass

    @triton.jit
    def gdc_launch_dependents():
        pass


_off = False  # set by disabled()


@functools.cache
def _supported(index: int) -> bool:
    return HAS_GDC and torch.cuda.get_device_capability(index)[0] >= 9


def enabled(device: torch.device) -> bool:
    """Whether kernels launched now on `device` use PDL: CUDA on sm90+, not switched off."""
    if _off or device.type != "cuda" or os.environ.get("BUBBLELAB_PDL", "1") == "0":
        return False
    return _supported(device.index if device.index is not None else torch.cuda.current_device())


def launch_options(device: torch.device) -> dict[str, bool]:
    """The keywords of a PDL-aware kernel's launch: its `PDL` constexpr and Triton's launch flag."""
    return {"PDL": True, "launch_pdl": True} if enabled(device) else {"PDL": False}


@contextlib.contextmanager
def disabled() -> Iterator[None]:
    """Kernels launched (or graphs captured) inside run without PDL: an A/B benchmark's baseline."""
    global _off
    before, _off = _off, True
    try:
        yield
    finally:
        _off = before


@triton.jit
def wait_for_inputs(PDL: tl.constexpr):
    """Called by a PDL-aware kernel before its first read of an activation and its first write:
    waits for every earlier kernel, then lets the next one start its own preamble."""
    if PDL:
        gdc_wait()
        gdc_launch_dependents()
