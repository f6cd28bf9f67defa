"""Attention backends: `select_backend(name, device)` picks flash-attn on CUDA when it imports, else torch."""
from __future__ import annotations

import torch

from engine.attention.base import AttentionBackend, store_kv_cache
from engine.attention.metadata import AttentionMetadata
from engine.errors import BubblelabError

__all__ = ["AttentionBackend", "AttentionMetadata", "select_backend", "store_kv_cache"]


def _flash_attn_importable() -> bool:
    try:
        import flash_attn  # noqa: F401
    except ImportError:
        return False
    return True


def select_backend(name: str, device: torch.device | str) -> AttentionBackend:
    """"auto" = flash-attn when it imports and the device is CUDA, else torch."""
    is_cuda = torch.device(device).type == "cuda"
    if name == "auto":
        name = "flash-attn" if is_cuda and _flash_attn_importable() else "torch"
    if name == "torch":
        from engine.attention.torch_backend import TorchAttention
        return TorchAttention()
    if name == "flash-attn":
        if not is_cuda:
            raise BubblelabError(f"attention backend flash-attn needs a CUDA device, got {device}")
        if not _flash_attn_importable():
            raise BubblelabError("attention backend flash-attn requested but `import flash_attn` fails; "
                                 "install flash-attn or use --attention-backend torch")
        from engine.attention.flash_backend import FlashAttention
        return FlashAttention()
    raise BubblelabError(f"unknown attention backend {name!r}; choose auto, torch or flash-attn")
