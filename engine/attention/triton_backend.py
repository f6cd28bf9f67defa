"""Attention in Triton (CUDA only): paged decode reads K/V pages in place through the block table,
and prefill runs a varlen causal kernel whose grid depends only on the token count, so whole
prefills are captured in CUDA graphs per token bucket (static_prefill)."""

from __future__ import annotations

import torch

from .metadata import AttentionMetadata
from .triton_decode import paged_decode_attention
from .triton_prefill import varlen_prefill_attention


class TritonAttention:
    name = "triton"
    block_size_multiple = 1
    static_prefill = True  # prefill reads sequence lengths from cu_seqlens on the device only

    def prepare(
        self, meta: AttentionMetadata, k_cache: torch.Tensor | None, dtype: torch.dtype
    ) -> AttentionMetadata:
        return meta  # the kernels read context_lens, block_tables and cu_seqlens directly

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
        if meta.is_prefill:
            assert meta.cu_seqlens is not None
            return varlen_prefill_attention(q, k, v, meta.cu_seqlens, scale)
        if k_cache is None or v_cache is None:
            raise ValueError("decode attention needs a bound KV cache")
        # The current token's K/V are already in the cache (store_kv_cache); context_lens counts it.
        assert meta.block_tables is not None and meta.context_lens is not None
        return paged_decode_attention(
            q, k_cache, v_cache, meta.block_tables, meta.context_lens, scale
        )
