"""Prefill attention of the torch backend: causal attention of each sequence over its own tokens,
for a flat batch of sequences, one kernel call per layer for the whole batch (on the GPU a
per-sequence loop of slices, SDPA and copies, ~6 launches per sequence per layer, was most of a
prefill's host time).

  CUDA, fp16/bf16: FlashAttention-2's varlen kernel as PyTorch ships it (`flash_prefill`), reading
  cu_seqlens on the device (no host sync); grouped-query attention is native (kv heads divide q
  heads). Called as the aten op rather than torch.nn.attention.varlen.varlen_attn, a Python custom
  op whose signature changes between torch releases and which launches a torch.zeros for its RNG
  state on every call.
  Elsewhere (CPU, fp32 CUDA): `dense_prefill`, one padded SDPA or the per-sequence loop by work.

The Triton backend has its own kernel (triton_prefill.py); the flash-attn backend calls flash-attn's
varlen kernel.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .metadata import AttentionMetadata


def prefill_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: AttentionMetadata, scale: float
) -> torch.Tensor:
    """q [N, heads, D], k/v [N, kv_heads, D] flat over meta's sequences -> [N, heads, D]."""
    if flash_usable(q):
        return flash_prefill(q, k, v, meta, scale)
    return dense_prefill(q, k, v, meta, scale)


def flash_usable(q: torch.Tensor) -> bool:
    # FA2's limits: CUDA, half precision, head_dim a multiple of 8 up to 256.
    return (
        q.is_cuda
        and q.dtype in (torch.float16, torch.bfloat16)
        and q.shape[-1] % 8 == 0
        and q.shape[-1] <= 256
    )


def flash_prefill(q, k, v, meta: AttentionMetadata, scale: float) -> torch.Tensor:
    # Positional schema stable since torch 2.3: (q, k, v, cu_q, cu_k, max_q, max_k, dropout_p,
    # is_causal, return_debug_mask, *, scale). cu_seqlens is int32 on the device, max_seqlen a
    # host int: no sync.
    cu, m = meta.cu_seqlens, meta.max_seqlen
    return torch.ops.aten._flash_attention_forward(
        q, k, v, cu, cu, m, m, 0.0, True, False, scale=scale
    )[0]


def loop_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: AttentionMetadata, scale: float
) -> torch.Tensor:
    """The reference: one causal SDPA per sequence (host-side lengths, so no sync to read them)."""
    assert meta.seq_lens is not None, "the per-sequence loop needs the lengths on the host"
    out = torch.empty_like(q)
    start = 0
    for length in meta.seq_lens:
        end = start + length
        qs, ks, vs = (x[start:end].transpose(0, 1) for x in (q, k, v))  # [heads, len, D]
        o = F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, scale=scale, enable_gqa=True)
        out[start:end] = o.transpose(0, 1)
        start = end
    return out


# CPU (2 cores, SmolLM2-135M shapes, 1-16 sequences of 32-200 tokens, attention alone): one SDPA
# over the sequences padded to the longest took 0.35-0.8x the loop's time when lengths are alike,
# but padding costs B * max_len^2 work against the loop's sum(len^2): at mixed 32-200 lengths (work
# ratio ~2-2.5) it was 1.0-2.3x slower. So one padded call when its work is within PAD_WORK_RATIO of
# the real work, else the loop. A single SDPA over all N tokens with a block-diagonal mask (N^2
# work) lost to both beyond ~250 tokens.
PAD_WORK_RATIO = 1.5


def dense_prefill(q, k, v, meta: AttentionMetadata, scale: float) -> torch.Tensor:
    lens = meta.seq_lens
    assert lens is not None, "dense prefill needs the lengths on the host"
    if len(lens) > 1 and len(lens) * meta.max_seqlen**2 <= PAD_WORK_RATIO * sum(
        n * n for n in lens
    ):
        return padded_attention(q, k, v, meta, scale)
    return loop_attention(q, k, v, meta, scale)


def padded_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: AttentionMetadata, scale: float
) -> torch.Tensor:
    """One causal SDPA over [B, heads, max_len, D]: row b holds sequence b's tokens, then padding.

    Causal masking is top-left aligned, so a real query never sees the padding behind it; the padded
    queries compute garbage that is never gathered back.
    """
    assert meta.seq_lens is not None, "a padded prefill needs the lengths on the host"
    batch, max_len, index = len(meta.seq_lens), meta.max_seqlen, meta.padded_index()

    def pad(x: torch.Tensor) -> torch.Tensor:
        padded = x.new_zeros(batch * max_len, *x.shape[1:]).index_copy_(0, index, x)
        return padded.view(batch, max_len, *x.shape[1:]).transpose(1, 2)

    o = F.scaled_dot_product_attention(
        pad(q), pad(k), pad(v), is_causal=True, scale=scale, enable_gqa=True
    )
    return o.transpose(1, 2).reshape(batch * max_len, *q.shape[1:]).index_select(0, index)
