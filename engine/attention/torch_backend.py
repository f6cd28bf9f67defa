"""Attention in plain PyTorch (scaled_dot_product_attention): runs everywhere, the CPU default."""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

from .metadata import AttentionMetadata
from .prefill import prefill_attention


class TorchAttention:
    name = "torch"
    block_size_multiple = 1
    static_prefill = False

    def prepare(
        self, meta: AttentionMetadata, k_cache: torch.Tensor | None, dtype: torch.dtype
    ) -> AttentionMetadata:
        """Decode: the additive length mask over the gathered pages, built once per step instead of
        once per layer."""
        if meta.is_prefill or k_cache is None or meta.context_lens is None:
            return meta
        block_size, block_tables = k_cache.shape[1], meta.block_tables
        assert block_tables is not None, "a decode step has block tables"
        if block_tables.device.type == "cpu":
            # No graphs and no device to wait for on CPU: gather only the pages in use, not the
            # table's full width (max_model_len), which made a CPU decode step ~10x slower.
            pages_in_use = -(-int(meta.context_lens.max()) // block_size)
            block_tables = block_tables[:, : max(pages_in_use, 1)]
        pos = torch.arange(block_tables.shape[1] * block_size, device=block_tables.device)
        # clamp: a padded row with length 0 still sees one (ignored) slot instead of producing NaN.
        visible = pos[None, :] < meta.context_lens.clamp(min=1)[:, None]  # [B, L]
        bias = torch.full(
            visible.shape, -torch.inf, dtype=dtype, device=visible.device
        ).masked_fill_(visible, 0.0)
        return dataclasses.replace(
            meta, block_tables=block_tables, attn_bias=bias[:, None, None, :]
        )

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
            return self._prefill(q, k, v, meta, scale)
        if k_cache is None or v_cache is None:
            raise ValueError("decode attention needs a bound KV cache")
        if meta.attn_bias is None:
            # A caller that skipped TransformerLM.forward, which prepares once per step.
            meta = self.prepare(meta, k_cache, q.dtype)
        return self._decode(q, k_cache, v_cache, meta, scale)

    @staticmethod
    def _prefill(
        q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: AttentionMetadata, scale: float
    ) -> torch.Tensor:
        # One kernel call for all the step's sequences (flash varlen on CUDA): see prefill.py.
        return prefill_attention(q, k, v, meta, scale)

    @staticmethod
    def _decode(
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: AttentionMetadata,
        scale: float,
    ) -> torch.Tensor:
        # Gather every row's pages into [B, kv_heads, L, D] under the step's mask: static shapes and
        # no host sync, so on CUDA this path can be graph-captured too.
        ks = k_cache[meta.block_tables].flatten(1, 2).transpose(1, 2)
        vs = v_cache[meta.block_tables].flatten(1, 2).transpose(1, 2)
        # Grouped-query attention as grouped queries: the query heads sharing a KV head are that
        # head's query rows, so no K/V repeat and no enable_gqa, and every SDPA kernel
        # (memory-efficient included) applies.
        batch, kv_heads, head_dim = q.shape[0], k_cache.shape[2], q.shape[-1]
        # o: [B, kv_heads, group, D]
        o = F.scaled_dot_product_attention(
            q.reshape(batch, kv_heads, -1, head_dim), ks, vs, attn_mask=meta.attn_bias, scale=scale
        )
        return o.reshape(batch, -1, head_dim)
