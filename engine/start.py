"""A fast engine start: one Triton cache for every kernel, and the slow imports done ahead.

One Triton cache: Inductor points TRITON_CACHE_DIR at its own directory (<its cache>/triton/
<device>) when it first builds a kernel, unless something set it before. Where its graphs compile
(cold caches) that happens before our Triton kernels are built, so they land there too; in the next
process its graphs come from its cache, the variable is not yet set when ours are built, and Triton
looks for them in ~/.triton/cache, finds none and compiles every one again: 13-17 s of a qwen3-4b
engine's start on an H200, each time a process follows a cold one (tools/gpu_machine/
compile_cache.sh). Set first, to where Inductor would set it, every process reads what the one
before wrote.

Imports ahead: building an engine on CUDA imports Triton, our kernels and torch.compile's Dynamo and
Inductor (seconds); a sweep's worker waiting for the GPU (runs.worker) imports them while it waits,
so they are not on the sweep's critical path after the GPU is free.
"""

from __future__ import annotations

import importlib
import os

import torch

# What building a CUDA engine imports on the way (torch.compile's first call, our Triton kernels).
AHEAD = (
    "torch._dynamo",
    "torch._inductor.compile_fx",
    ".triton_gemm",
    ".fused_gemv",
    ".triton_sampler",
    ".attention.triton_decode",
    ".attention.triton_prefill",
    ".models.triton_fused",
)


def share_triton_cache(device_index: int) -> str:
    """Sets TRITON_CACHE_DIR, where unset, to Inductor's Triton directory for this device; returns
    the directory this process's kernels go to (a user's own setting is kept)."""
    chosen = os.environ.get("TRITON_CACHE_DIR")
    if chosen is None:
        from torch._inductor.runtime.cache_dir_utils import triton_cache_dir

        chosen = os.environ["TRITON_CACHE_DIR"] = triton_cache_dir(device_index)
    return chosen


def import_ahead(device: str) -> list[str]:
    """Imports now what building an engine on `device` would import later (nothing off CUDA);
    returns the modules that would not import (the engine says why when it needs them)."""
    if torch.device(device).type != "cuda":
        return []
    failed = []
    for name in AHEAD:
        try:
            importlib.import_module(name, __package__)
        except ImportError:
            failed.append(name)
    return failed
