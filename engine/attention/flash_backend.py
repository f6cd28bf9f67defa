"""Attention through flash-attn (CUDA only): FA4 (`flash_attn.cute`) when it imports, else FA2.

FA4 (4.0.0b36 + nvidia-cutlass-dsl 4.8.1; see tools/gpu_machine/README.md):
  - SM90/SM100, bf16 or fp16, head_dim a multiple of 8 up to 256 (SM90), GQA with
    heads % kv_heads == 0, int32 cu_seqlens / context_lens / block_tables (the engine's metadata
    already is).
  - Pages of any size (block_size_multiple = 1). block_size == the kernel's key tile (128 at
    head_dim 128 on SM90) loads whole pages by TMA, the fast path; other sizes use a cp.async
    gather. The TMA path reads the unused tail rows of a sequence's last page: they must be finite
    (the engine's cache starts zeroed).
  - The first call per shape family compiles (CuTe DSL JIT, seconds; cached on disk): the engine's
    warm-up runs every bucket before CUDA-graph capture, so capture sees compiled kernels. No host
    syncs: the grid is sized from host-known max_seqlen / shapes.
FA2: the paged KV path (flash_attn_with_kvcache with block_table) needs block_size % 256 == 0
  (Dao-AILab/flash-attention#828); smaller pages are rejected with a clear error instead of a
  kernel failure.

A real FA2 is recognised by its own `flash_attn.flash_attn_interface`, which loads the compiled
kernels (`flash_attn_2_cuda`): a `flash_attn` that only offers FA2's API (a stand-in over FA4 such
as nano-vllm runs on) or FA4's namespace portion is never taken for FA2.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

import torch

from ...core.errors import BubblelabError
from .metadata import AttentionMetadata

FA2_BLOCK_SIZE_MULTIPLE = 256
FA4_BLOCK_SIZE_MULTIPLE = 1
FA4_DTYPES = (torch.bfloat16, torch.float16)
FA4_MAX_HEAD_DIM = 256


def fa4_entry() -> Callable | None:
    """flash_attn.cute.flash_attn_varlen_func, or None when FA4 does not import (any error: a broken
    CUDA library or a missing cutlass-dsl is as good as absent)."""
    try:
        return importlib.import_module("flash_attn.cute").flash_attn_varlen_func
    except Exception:  # noqa: BLE001
        return None


def fa2_entries() -> tuple[Callable, Callable] | None:
    """(flash_attn_varlen_func, flash_attn_with_kvcache) of a real FA2, or None."""
    try:
        # FA2's own module, loading its compiled kernels (flash_attn_2_cuda): only real FA2 has it.
        module = importlib.import_module("flash_attn.flash_attn_interface")
        return module.flash_attn_varlen_func, module.flash_attn_with_kvcache
    # ImportError, AttributeError (a namespace package), CUDA library errors: all mean no FA2.
    except Exception:  # noqa: BLE001
        return None


def available_impl() -> str | None:
    """ "fa4", "fa2" or None: what FlashAttention() would use here."""
    if fa4_entry() is not None:
        return "fa4"
    if fa2_entries() is not None:
        return "fa2"
    return None


def fa4_prefill_kwargs(meta: AttentionMetadata, scale: float) -> dict:
    """Keyword arguments of FA4's varlen causal prefill (max_seqlen on the host: FA4 sizes its grid
    from it)."""
    return dict(
        cu_seqlens_q=meta.cu_seqlens,
        cu_seqlens_k=meta.cu_seqlens,
        max_seqlen_q=meta.max_seqlen,
        max_seqlen_k=meta.max_seqlen,
        softmax_scale=scale,
        causal=True,
    )


def fa4_decode_kwargs(meta: AttentionMetadata, scale: float) -> dict:
    """Keyword arguments of FA4's paged decode: one query token per row as a batched [B, 1, H, D]
    query; the current token's K/V are already in the cache, so context_lens (which counts it) is
    each row's key length."""
    return dict(
        seqused_k=meta.context_lens, page_table=meta.block_tables, softmax_scale=scale, causal=True
    )


def check_fa4_shapes(q: torch.Tensor, kv_heads: int) -> None:
    """BubblelabError for what FA4 cannot run, from host-known shapes and dtypes (no sync, so
    capture-safe)."""
    heads, head_dim = q.shape[-2], q.shape[-1]
    if q.dtype not in FA4_DTYPES:
        raise BubblelabError(
            f"flash-attn-4 needs bf16 or fp16, got {q.dtype}; use --dtype bf16 or the torch backend"
        )
    if head_dim % 8 or head_dim > FA4_MAX_HEAD_DIM:
        raise BubblelabError(
            f"flash-attn-4 needs head_dim a multiple of 8 up to {FA4_MAX_HEAD_DIM}, got "
            f"{head_dim}; use the triton or torch backend"
        )
    if heads % kv_heads:
        raise BubblelabError(
            f"flash-attn-4 needs heads % kv_heads == 0, got {heads} and {kv_heads}"
        )


class FlashAttention:
    """`impl` None: FA4 when it imports, else FA2; "fa4" / "fa2" force one (BubblelabError if
    missing)."""

    name = "flash-attn"
    static_prefill = False  # the varlen kernels size their grid from the host's max_seqlen

    def __init__(self, impl: str | None = None) -> None:
        if impl not in (None, "fa4", "fa2"):
            raise BubblelabError(f"unknown flash-attn implementation {impl!r}; choose fa4 or fa2")
        self._fa4 = fa4_entry() if impl in (None, "fa4") else None
        self._fa2 = fa2_entries() if self._fa4 is None and impl in (None, "fa2") else None
        if self._fa4 is not None:
            self.impl, self.block_size_multiple = "fa4", FA4_BLOCK_SIZE_MULTIPLE
        elif self._fa2 is not None:
            self.impl, self.block_size_multiple = "fa2", FA2_BLOCK_SIZE_MULTIPLE
        else:
            raise BubblelabError(
                "attention backend flash-attn: neither flash-attn-4 (`flash_attn.cute`) nor "
                "flash-attn 2 imports; install one or use --attention-backend triton/torch"
            )

    def prepare(
        self, meta: AttentionMetadata, k_cache: torch.Tensor | None, dtype: torch.dtype
    ) -> AttentionMetadata:
        return meta  # flash-attn reads context_lens and block_tables directly

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        k_cache: torch.Tensor | None,
        v_cache: torch.Tensor | None,
        meta: AttentionMetadata,
        scale: float,
    ) -> torch.Tensor:
        if self._fa4 is not None:
            return self._forward_fa4(q, k, v, k_cache, v_cache, meta, scale)
        return self._forward_fa2(q, k, v, k_cache, v_cache, meta, scale)

    def _forward_fa4(self, q, k, v, k_cache, v_cache, meta, scale) -> torch.Tensor:
        assert self._fa4 is not None
        if meta.is_prefill:
            check_fa4_shapes(q, k.shape[-2])
            out, _ = self._fa4(q, k, v, **fa4_prefill_kwargs(meta, scale))
            return out
        if k_cache is None or v_cache is None:
            raise ValueError("decode attention needs a bound KV cache")
        check_fa4_shapes(q, k_cache.shape[-2])
        out, _ = self._fa4(q.unsqueeze(1), k_cache, v_cache, **fa4_decode_kwargs(meta, scale))
        return out.squeeze(1)

    def _forward_fa2(self, q, k, v, k_cache, v_cache, meta, scale) -> torch.Tensor:
        assert self._fa2 is not None  # __init__ found FA4 or FA2
        varlen, with_kvcache = self._fa2
        if k_cache is not None and k_cache.shape[1] % FA2_BLOCK_SIZE_MULTIPLE:
            raise BubblelabError(
                f"flash-attn 2 paged KV needs block_size % {FA2_BLOCK_SIZE_MULTIPLE} == 0, "
                f"got {k_cache.shape[1]}; use a larger block size or the triton/torch backend"
            )
        if meta.is_prefill:
            return varlen(
                q,
                k,
                v,
                cu_seqlens_q=meta.cu_seqlens,
                cu_seqlens_k=meta.cu_seqlens,
                max_seqlen_q=meta.max_seqlen,
                max_seqlen_k=meta.max_seqlen,
                softmax_scale=scale,
                causal=True,
            )
        if k_cache is None:
            raise ValueError("decode attention needs a bound KV cache")
        # The current token's K/V are already in the cache, and context_lens counts it.
        o = with_kvcache(
            q.unsqueeze(1),
            k_cache,
            v_cache,
            cache_seqlens=meta.context_lens,
            block_table=meta.block_tables,
            softmax_scale=scale,
            causal=True,
        )
        return o.squeeze(1)
