"""Attention in plain PyTorch (scaled_dot_product_attention): runs everywhere, the CPU default."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from engine.attention.base import store_kv_cache
from engine.attention.metadata import AttentionMetadata


class TorchAttention:
    name = "torch"
    block_size_multiple = 1

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                k_cache: torch.Tensor | None, v_cache: torch.Tensor | None,
                meta: AttentionMetadata, scale: float) -> torch.Tensor:
        if k_cache is not None and meta.slot_mapping is not None:
            store_kv_cache(k, v, k_cache, v_cache, meta.slot_mapping)
        if meta.is_prefill:
            return self._prefill(q, k, v, meta, scale)
        if k_cache is None:
            raise ValueError("decode attention needs a bound KV cache")
        return self._decode(q, k_cache, v_cache, meta, scale)

    @staticmethod
    def _prefill(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 meta: AttentionMetadata, scale: float) -> torch.Tensor:
        # Host-side lengths: reading cu_seqlens back would stall the host behind the GPU in every prefill launch.
        out = torch.empty_like(q)
        start = 0
        for length in meta.seq_lens:
            end = start + length
            qs, ks, vs = (x[start:end].transpose(0, 1) for x in (q, k, v))  # [heads, len, D]
            o = F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, scale=scale, enable_gqa=True)
            out[start:end] = o.transpose(0, 1)
            start = end
        return out

    @staticmethod
    def _decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                meta: AttentionMetadata, scale: float) -> torch.Tensor:
        # Gather every row's pages into [B, pages * block_size, kv_heads, D] and mask past its length:
        # static shapes and no host sync, so on CUDA this path can be graph-captured too.
        block_size = k_cache.shape[1]
        block_tables = meta.block_tables
        if q.device.type == "cpu":
            # No graphs and no device to wait for on CPU: gather only the pages in use, not the table's full
            # width (max_model_len), which made a CPU decode step ~10x slower.
            pages_in_use = -(-int(meta.context_lens.max()) // block_size)
            block_tables = block_tables[:, :max(pages_in_use, 1)]
        ks = k_cache[block_tables].flatten(1, 2).transpose(1, 2)  # [B, kv_heads, L, D]
        vs = v_cache[block_tables].flatten(1, 2).transpose(1, 2)
        pos = torch.arange(ks.shape[2], device=q.device)
        # clamp: a padded row with length 0 still sees one (ignored) slot instead of producing NaN.
        mask = pos[None, :] < meta.context_lens.clamp(min=1)[:, None]  # [B, L]
        o = F.scaled_dot_product_attention(q.unsqueeze(2), ks, vs, attn_mask=mask[:, None, None, :],
                                           scale=scale, enable_gqa=True)  # [B, H, 1, D]
        return o.squeeze(2)
