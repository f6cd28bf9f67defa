"""One Triton cache directory for every kernel a process builds, ours and Inductor's.

Inductor points TRITON_CACHE_DIR at its own directory (<its cache>/triton/<device>) when it first
builds a kernel, unless something set it before. Where its graphs compile (cold caches) that happens
before our Triton kernels are built, so they land there too; in the next process its graphs come
from its cache, the variable is not yet set when ours are built, and Triton looks for them in
~/.triton/cache, finds none and compiles every one again: 13-17 s of a qwen3-4b engine's start on an
H200, each time a process follows a cold one (tools/gpu_machine/compile_cache.sh). Set first, to
where Inductor would set it, every process reads what the one before wrote.
"""

from __future__ import annotations

import os


def share_triton_cache(device_index: int) -> str:
    """Sets TRITON_CACHE_DIR, where unset, to Inductor's Triton directory for this device; returns
    the directory this process's kernels go to (a user's own setting is kept)."""
    chosen = os.environ.get("TRITON_CACHE_DIR")
    if chosen is None:
        from torch._inductor.runtime.cache_dir_utils import triton_cache_dir

        chosen = os.environ["TRITON_CACHE_DIR"] = triton_cache_dir(device_index)
    return chosen
