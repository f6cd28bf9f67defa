"""Prefill attention: causal attention of each sequence over its own tokens, for a flat batch of sequences.

One kernel call per layer for the whole batch, never one per sequence: on the GPU a prefill is host-bound, and
the per-sequence loop (slices, SDPA, copy back: ~6 launches per sequence per layer) was most of its host time.

  CUDA, fp16/bf16: FlashAttention-2's varlen kernel as PyTorch ships it, reading cu_seqlens on the device
  (no host sync); grouped-query attention is native (kv heads divide q heads). Called as the aten op, not via
  torch.nn.attention.varlen.varlen_attn: that is a Python custom op whose signature changes between torch
  releases, and it launches a torch.zeros for its RNG state on every call. varlen_attn is the fallback when the
  aten op is unusable, the per-sequence loop the last resort.
  Elsewhere (CPU, fp32 CUDA): see `_dense` below.

`set_impl` picks a path by name for benchmarks and tests; "auto" is the default.
"""

from __future__ import annotations

import inspect
import logging
import os

import torch
import torch.nn.functional as F

from bubblelab.engine.attention.metadata import AttentionMetadata

log = logging.getLogger(__name__)

IMPLS = ("auto", "flash", "varlen_attn", "padded", "loop")
_impl = os.environ.get("BUBBLELAB_PREFILL_ATTN", "auto")
# CUDA kernels that failed on first use (not built into this torch, unsupported GPU): not tried again.
_unusable: set[str] = set()
_proven: set[str] = set()  # kernels that ran once: a later failure is a real error, raised


def set_impl(name: str) -> None:
    """Select the prefill path: auto | flash | varlen_attn | padded | loop (the old per-sequence loop)."""
    global _impl
    if name not in IMPLS:
        raise ValueError(f"unknown prefill attention {name!r}; choose one of {', '.join(IMPLS)}")
    _impl = name


def get_impl() -> str:
    return _impl


def prefill_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: AttentionMetadata, scale: float
) -> torch.Tensor:
    """q [N, heads, D], k/v [N, kv_heads, D] flat over meta's sequences -> [N, heads, D]."""
    impl = _impl
    if impl in ("auto", "flash", "varlen_attn") and _flash_shapes_ok(q):
        for name in ("flash", "varlen_attn") if impl == "auto" else (impl,):
            out = _try_cuda_kernel(name, q, k, v, meta, scale)
            if out is not None:
                return out
    if impl == "loop":
        return loop_attention(q, k, v, meta, scale)
    return _dense(q, k, v, meta, scale)


def _flash_shapes_ok(q: torch.Tensor) -> bool:
    # FA2's limits: half precision, head_dim a multiple of 8 up to 256.
    return (
        q.is_cuda
        and q.dtype in (torch.float16, torch.bfloat16)
        and q.shape[-1] % 8 == 0
        and q.shape[-1] <= 256
    )


def _try_cuda_kernel(
    name: str, q, k, v, meta: AttentionMetadata, scale: float
) -> torch.Tensor | None:
    if name in _unusable:
        return None
    try:
        out = (
            _flash(q, k, v, meta, scale) if name == "flash" else _varlen_attn(q, k, v, meta, scale)
        )
    except (RuntimeError, TypeError, AttributeError, ImportError, NotImplementedError) as e:
        if name in _proven:
            raise
        _unusable.add(name)
        log.warning(
            "prefill attention %s unusable here (%s: %s); falling back",
            name,
            type(e).__name__,
            str(e).splitlines()[0] if str(e) else "",
        )
        return None
    _proven.add(name)
    return out


def _flash(q, k, v, meta: AttentionMetadata, scale: float) -> torch.Tensor:
    # Positional schema stable since torch 2.3: (q, k, v, cu_q, cu_k, max_q, max_k, dropout_p, is_causal,
    # return_debug_mask, *, scale). cu_seqlens is int32 on the device, max_seqlen a host int: no sync.
    cu, m = meta.cu_seqlens, meta.max_seqlen
    return torch.ops.aten._flash_attention_forward(
        q, k, v, cu, cu, m, m, 0.0, True, False, scale=scale
    )[0]


def _varlen_attn(q, k, v, meta: AttentionMetadata, scale: float) -> torch.Tensor:
    fn, kwargs = _varlen_api()
    cu, m = meta.cu_seqlens, meta.max_seqlen
    return fn(q, k, v, cu, cu, m, m, scale=scale, **kwargs)


_varlen_cache: tuple | None = None


def _varlen_api() -> tuple:
    """varlen_attn and the keyword arguments that make it causal with GQA, for this torch's signature."""
    global _varlen_cache
    if _varlen_cache is None:
        from torch.nn.attention.varlen import varlen_attn

        params = inspect.signature(varlen_attn).parameters
        if "window_size" in params:  # recent torch (2.13 here): causal = window (-1, 0)
            kwargs: dict = {"window_size": (-1, 0)}
        elif "is_causal" in params:  # its first releases
            kwargs = {"is_causal": True}
        else:
            raise TypeError("varlen_attn has neither window_size nor is_causal")
        if "enable_gqa" in params:
            kwargs["enable_gqa"] = True
        _varlen_cache = (varlen_attn, kwargs)
    return _varlen_cache


def loop_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: AttentionMetadata, scale: float
) -> torch.Tensor:
    """The reference: one causal SDPA per sequence (host-side lengths, so no sync to read them)."""
    out = torch.empty_like(q)
    start = 0
    for length in meta.seq_lens:
        end = start + length
        qs, ks, vs = (x[start:end].transpose(0, 1) for x in (q, k, v))  # [heads, len, D]
        o = F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, scale=scale, enable_gqa=True)
        out[start:end] = o.transpose(0, 1)
        start = end
    return out


# CPU (2 cores, SmolLM2-135M shapes, 1-16 sequences of 32-200 tokens, attention alone): one SDPA over the
# sequences padded to the longest took 0.35-0.8x the loop's time when lengths are alike, but padding costs
# B * max_len^2 work against the loop's sum(len^2): at mixed 32-200 lengths (work ratio ~2-2.5) it was 1.0-2.3x
# slower. So one padded call when its work is within PAD_WORK_RATIO of the real work, else the loop. A single
# SDPA over all N tokens with a block-diagonal mask (N^2 work) lost to both beyond ~250 tokens.
PAD_WORK_RATIO = 1.5


def _dense(q, k, v, meta: AttentionMetadata, scale: float) -> torch.Tensor:
    lens = meta.seq_lens
    if _impl == "padded" or (
        len(lens) > 1
        and len(lens) * meta.max_seqlen**2 <= PAD_WORK_RATIO * sum(n * n for n in lens)
    ):
        return padded_attention(q, k, v, meta, scale)
    return loop_attention(q, k, v, meta, scale)


def padded_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: AttentionMetadata, scale: float
) -> torch.Tensor:
    """One causal SDPA over [B, heads, max_len, D]: row b holds sequence b's tokens, then padding.

    Causal masking is top-left aligned, so a real query never sees the padding behind it; the padded queries
    compute garbage that is never gathered back.
    """
    batch, max_len, index = len(meta.seq_lens), meta.max_seqlen, meta.padded_index()

    def pad(x: torch.Tensor) -> torch.Tensor:
        padded = x.new_zeros(batch * max_len, *x.shape[1:]).index_copy_(0, index, x)
        return padded.view(batch, max_len, *x.shape[1:]).transpose(1, 2)

    o = F.scaled_dot_product_attention(
        pad(q), pad(k), pad(v), is_causal=True, scale=scale, enable_gqa=True
    )
    return o.transpose(1, 2).reshape(batch * max_len, *q.shape[1:]).index_select(0, index)
