"""Attention through flash-attn 2 (CUDA only).

FA2's paged KV path (flash_attn_with_kvcache with block_table) requires pages whose block_size is a
multiple of 256 tokens (Dao-AILab/flash-attention#828); smaller pages are rejected with a clear error instead
of a kernel failure. Callers read `block_size_multiple` to size their pages.
"""
from __future__ import annotations

import torch
from flash_attn import flash_attn_varlen_func, flash_attn_with_kvcache

from engine.attention.metadata import AttentionMetadata
from engine.errors import BubblelabError

FA2_BLOCK_SIZE_MULTIPLE = 256


class FlashAttention:
    name = "flash-attn"
    block_size_multiple = FA2_BLOCK_SIZE_MULTIPLE

    def prepare(self, meta: AttentionMetadata, k_cache: torch.Tensor | None, dtype: torch.dtype
                ) -> AttentionMetadata:
        return meta  # flash-attn reads context_lens and block_tables directly

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                k_cache: torch.Tensor | None, v_cache: torch.Tensor | None,
                meta: AttentionMetadata, scale: float) -> torch.Tensor:
        if k_cache is not None and k_cache.shape[1] % FA2_BLOCK_SIZE_MULTIPLE:
            raise BubblelabError(f"flash-attn paged KV needs block_size % {FA2_BLOCK_SIZE_MULTIPLE} == 0, "
                                 f"got {k_cache.shape[1]}; use a larger block size or the torch backend")
        if meta.is_prefill:
            return flash_attn_varlen_func(q, k, v, cu_seqlens_q=meta.cu_seqlens, cu_seqlens_k=meta.cu_seqlens,
                                          max_seqlen_q=meta.max_seqlen, max_seqlen_k=meta.max_seqlen,
                                          softmax_scale=scale, causal=True)
        if k_cache is None:
            raise ValueError("decode attention needs a bound KV cache")
        # K/V of the current token are already in the cache, so context_lens (which counts it) is the length.
        o = flash_attn_with_kvcache(q.unsqueeze(1), k_cache, v_cache, cache_seqlens=meta.context_lens,
                                    block_table=meta.block_tables, softmax_scale=scale, causal=True)
        return o.squeeze(1)
