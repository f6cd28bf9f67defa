"""Attention backends: `select_backend(name, device)` picks flash-attn on CUDA when it imports, else
the Triton paged decode kernel on CUDA when Triton is usable, else torch."""

from __future__ import annotations

import os
import shutil

import torch

from ...core.errors import BubblelabError
from .base import AttentionBackend, store_kv_cache
from .metadata import AttentionMetadata

__all__ = ["AttentionBackend", "AttentionMetadata", "select_backend", "store_kv_cache"]


def _flash_attn_importable() -> bool:
    """flash-attn-4 (`flash_attn.cute`) or a real FA2 imports; a stand-in with FA2's API alone (such
    as tools/gpu_machine/flash_attn_shim) does not count."""
    from .flash_backend import available_impl

    return available_impl() is not None


def _triton_problem() -> str | None:
    """Why the Triton backend cannot run here, or None (Triton builds its launcher with a C compiler
    at first use)."""
    try:
        import triton  # noqa: F401
    except ImportError as exc:
        return f"`import triton` fails ({exc})"
    if not any(shutil.which(cc) for cc in (os.environ.get("CC"), "gcc", "clang") if cc):
        return "Triton needs a C compiler (gcc, clang or $CC) to build its kernel launcher"
    return None


def select_backend(name: str, device: torch.device | str) -> AttentionBackend:
    """ "auto": on CUDA flash-attn when it imports, else triton when usable, else torch; off CUDA
    torch."""
    is_cuda = torch.device(device).type == "cuda"
    if name == "auto":
        if is_cuda and _flash_attn_importable():
            name = "flash-attn"
        elif is_cuda and _triton_problem() is None:
            name = "triton"
        else:
            name = "torch"
    if name == "torch":
        from .torch_backend import TorchAttention

        return TorchAttention()
    if name == "flash-attn":
        if not is_cuda:
            raise BubblelabError(f"attention backend flash-attn needs a CUDA device, got {device}")
        if not _flash_attn_importable():
            raise BubblelabError(
                "attention backend flash-attn requested but neither flash-attn-4 "
                "(`flash_attn.cute`) nor flash-attn 2 imports; install one or use "
                "--attention-backend triton/torch"
            )
        from .flash_backend import FlashAttention

        return FlashAttention()
    if name == "triton":
        # Off CUDA only the Triton interpreter (TRITON_INTERPRET=1) could run it: far too slow.
        if not is_cuda:
            raise BubblelabError(f"attention backend triton needs a CUDA device, got {device}")
        problem = _triton_problem()
        if problem:
            raise BubblelabError(
                f"attention backend triton requested but {problem}; "
                "fix that or use --attention-backend torch"
            )
        from .triton_backend import TritonAttention

        return TritonAttention()
    raise BubblelabError(
        f"unknown attention backend {name!r}; choose auto, torch, flash-attn or triton"
    )
