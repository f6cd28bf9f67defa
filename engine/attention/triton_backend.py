"""Attention with a Triton paged decode kernel (CUDA only): decode reads K/V pages in place through the block table.

Prefill stays on the torch backend's varlen path; decode replaces the torch backend's page gather + masked SDPA
(several kernels and a dense copy of every row's pages per layer) with one kernel, plus a merge when split.
"""

from __future__ import annotations

import torch

from bubblelab.engine.attention.metadata import AttentionMetadata
from bubblelab.engine.attention.torch_backend import TorchAttention
from bubblelab.engine.attention.triton_decode import paged_decode_attention


class TritonAttention:
    name = "triton"
    block_size_multiple = 1

    def prepare(
        self, meta: AttentionMetadata, k_cache: torch.Tensor | None, dtype: torch.dtype
    ) -> AttentionMetadata:
        return meta  # the kernel reads context_lens and block_tables directly; no mask to build

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
            return TorchAttention._prefill(q, k, v, meta, scale)
        if k_cache is None or v_cache is None:
            raise ValueError("decode attention needs a bound KV cache")
        # K/V of the current token are already in the cache (store_kv_cache), and context_lens counts it.
        return paged_decode_attention(
            q, k_cache, v_cache, meta.block_tables, meta.context_lens, scale
        )
