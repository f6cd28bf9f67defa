"""A stand-in `flash_attn` (FA2 API) for nano-vllm, on top of flash-attn-4 (CuTe DSL) or, failing
that, torch SDPA.

Put `tools/gpu_machine/flash_attn_shim` on PYTHONPATH together with the staged flash-attn-4 tree.
Exactly the two FA2 functions nano-vllm (nanovllm/layers/attention.py) calls, with the arguments it
passes:

  flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                         softmax_scale, causal, block_table=None)
      no block_table: plain varlen
          -> flash_attn.cute.flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k,
             max_seqlen_q, max_seqlen_k, ...)
      block_table (prefix cache, k/v are the paged caches [pages, page_size, kv_heads, D])
          -> the same with page_table=block_table and seqused_k = diff(cu_seqlens_k): FA4 refuses
             cu_seqlens_k together with page_table
  flash_attn_with_kvcache(q [B, 1, H, D], k_cache, v_cache, cache_seqlens, block_table,
                          softmax_scale, causal)
          -> flash_attn.cute.flash_attn_varlen_func(q, k_cache, v_cache, seqused_k=cache_seqlens,
             page_table=block_table, ...) (batched q)
FA4 returns (out, lse); FA2 returns out, and so does the shim. Anything else FA2 offers (k/v
appended in flash_attn_with_kvcache, dropout, alibi, windows, ...) raises NotImplementedError
instead of being ignored.

FA4 facts this relies on (4.0.0b36): bf16/fp16, head_dim 8..256 on SM90 (multiple of 8), GQA via
nheads % nheads_kv == 0, int32 cu_seqlens / seqused_k / page_table, any page size (page_size == the
kernel's key tile, 128 at head_dim 128 on SM90, loads pages by TMA; other sizes by cp.async), causal
aligned bottom-right as in FA2. nano-vllm pads page_table rows with -1; FA4 should never read
entries past a sequence's pages (tools/gpu_machine/fa4_smoke.py, stage decode_pad-1, checks it).

FLASH_ATTN_SHIM_BACKEND=sdpa forces the slow fallback (per-sequence SDPA, gathered pages); the
default "auto" uses FA4 when `flash_attn.cute` imports and says on stderr when it falls back.
"""

from __future__ import annotations

import os
import pkgutil
import sys
from typing import overload

import torch
import torch.nn.functional as F

# flash-attn-4 installs `flash_attn/cute/` with no flash_attn/__init__.py (a namespace portion).
# This regular package would hide it, so take every other `flash_attn` portion on sys.path into our
# __path__.
__path__ = pkgutil.extend_path(__path__, __name__)
__version__ = "2.0.0+fa4shim"

_FA4 = None


def _fa4():
    """flash_attn.cute's varlen entry point, or None for the SDPA fallback (decided once)."""
    global _FA4
    if _FA4 is None:
        choice = os.environ.get("FLASH_ATTN_SHIM_BACKEND", "auto")
        _FA4 = False
        if choice != "sdpa":
            try:
                from flash_attn.cute import flash_attn_varlen_func as fa4_varlen

                _FA4 = fa4_varlen
            except Exception as exc:  # any import failure: the fallback (an error when forced)
                if choice == "fa4":
                    raise
                why = f"{type(exc).__name__}: {exc}"
                print(
                    f"flash_attn shim: flash-attn-4 unavailable ({why}); using SDPA",
                    file=sys.stderr,
                )
    return _FA4 or None


def backend() -> str:
    return "fa4" if _fa4() is not None else "sdpa"


@overload
def _int32(t: torch.Tensor) -> torch.Tensor: ...
@overload
def _int32(t: None) -> None: ...
def _int32(t: torch.Tensor | None) -> torch.Tensor | None:
    """FA4 asserts int32 lengths and page tables; FA2 callers may hand int64."""
    return t if t is None or t.dtype == torch.int32 else t.to(torch.int32)


def _reject(**unsupported) -> None:
    """Raise for any FA2 argument given a non-default value (a tensor always counts as given)."""
    bad = [
        k
        for k, v in unsupported.items()
        if v is not None and (isinstance(v, torch.Tensor) or v not in (False, 0, 0.0, (-1, -1)))
    ]
    if bad:
        raise NotImplementedError(f"flash_attn shim (FA4): unsupported FA2 arguments {bad}")


def flash_attn_varlen_func(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    dropout_p: float = 0.0,
    softmax_scale: float | None = None,
    causal: bool = False,
    window_size: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    alibi_slopes: torch.Tensor | None = None,
    deterministic: bool = False,
    return_attn_probs: bool = False,
    block_table: torch.Tensor | None = None,
) -> torch.Tensor:
    """q [total_q, H, D]; k/v [total_k, Hkv, D], or paged [pages, page_size, Hkv, D] with
    block_table."""
    _reject(
        dropout_p=dropout_p,
        window_size=window_size,
        softcap=softcap,
        alibi_slopes=alibi_slopes,
        return_attn_probs=return_attn_probs,
    )
    cu_q, cu_k, table = _int32(cu_seqlens_q), _int32(cu_seqlens_k), _int32(block_table)
    fa4 = _fa4()
    if fa4 is None:
        return _sdpa_varlen(q, k, v, cu_q, cu_k, softmax_scale, causal, table)
    if table is None:
        out, _ = fa4(
            q,
            k,
            v,
            cu_seqlens_q=cu_q,
            cu_seqlens_k=cu_k,
            max_seqlen_q=max_seqlen_q,
            max_seqlen_k=max_seqlen_k,
            softmax_scale=softmax_scale,
            causal=causal,
        )
    else:  # FA4: page_table excludes cu_seqlens_k, so give per-sequence key lengths instead
        out, _ = fa4(
            q,
            k,
            v,
            cu_seqlens_q=cu_q,
            seqused_k=cu_k[1:] - cu_k[:-1],
            max_seqlen_q=max_seqlen_q,
            max_seqlen_k=max_seqlen_k,
            page_table=table,
            softmax_scale=softmax_scale,
            causal=causal,
        )
    return out


def flash_attn_with_kvcache(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    k: torch.Tensor | None = None,
    v: torch.Tensor | None = None,
    rotary_cos: torch.Tensor | None = None,
    rotary_sin: torch.Tensor | None = None,
    cache_seqlens: torch.Tensor | int | None = None,
    cache_batch_idx: torch.Tensor | None = None,
    cache_leftpad: torch.Tensor | None = None,
    block_table: torch.Tensor | None = None,
    softmax_scale: float | None = None,
    causal: bool = False,
    window_size: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    rotary_interleaved: bool = True,
    alibi_slopes: torch.Tensor | None = None,
    num_splits: int = 0,
    return_softmax_lse: bool = False,
) -> torch.Tensor:
    """q [B, Sq, H, D]; paged k_cache/v_cache [pages, page_size, Hkv, D] with block_table [B,
    max_pages]."""
    _reject(
        k=k,
        v=v,
        rotary_cos=rotary_cos,
        rotary_sin=rotary_sin,
        cache_batch_idx=cache_batch_idx,
        cache_leftpad=cache_leftpad,
        window_size=window_size,
        softcap=softcap,
        alibi_slopes=alibi_slopes,
        return_softmax_lse=return_softmax_lse,
    )
    if block_table is None or cache_seqlens is None:
        raise NotImplementedError(
            "flash_attn shim (FA4): flash_attn_with_kvcache needs block_table and "
            "cache_seqlens (the only form nano-vllm uses)"
        )
    if isinstance(cache_seqlens, int):
        cache_seqlens = torch.full((q.shape[0],), cache_seqlens, dtype=torch.int32, device=q.device)
    lens, table = _int32(cache_seqlens), _int32(block_table)
    fa4 = _fa4()
    if fa4 is None:
        return _sdpa_decode(q, k_cache, v_cache, lens, table, softmax_scale, causal)
    # num_splits stays 1: FA4 has no SplitKV on SM90.
    out, _ = fa4(
        q,
        k_cache,
        v_cache,
        seqused_k=lens,
        page_table=table,
        softmax_scale=softmax_scale,
        causal=causal,
    )
    return out


# --- last resort: torch SDPA (correct, slow, reads cu_seqlens on the host: not CUDA-graph safe) ---


def _sdpa_varlen(q, k, v, cu_q, cu_k, scale, causal, table):
    out = torch.empty_like(q)
    bounds_q, bounds_k = cu_q.tolist(), cu_k.tolist()
    for b in range(len(bounds_q) - 1):
        q0, q1, k0, k1 = bounds_q[b], bounds_q[b + 1], bounds_k[b], bounds_k[b + 1]
        if table is None:
            kb, vb = k[k0:k1], v[k0:k1]
        else:  # paged: this sequence's pages, first k1 - k0 rows
            kb, vb = (c[table[b].clamp(min=0)].flatten(0, 1)[: k1 - k0] for c in (k, v))
        out[q0:q1] = _sdpa(q[q0:q1], kb, vb, scale, causal)
    return out


def _sdpa_decode(q, k_cache, v_cache, lens, table, scale, causal):
    batch, sq = q.shape[:2]
    out = torch.empty_like(q)
    for b, n in enumerate(lens.tolist()):
        if n == 0:
            out[b].zero_()
            continue
        kb, vb = (c[table[b].clamp(min=0)].flatten(0, 1)[:n] for c in (k_cache, v_cache))
        out[b] = _sdpa(q[b], kb, vb, scale, causal)
    return out


def _sdpa(q, k, v, scale, causal):
    """[Sq, H, D] x [Sk, Hkv, D]; causal aligned bottom-right (query i sees keys up to Sk - Sq + i),
    as in FA2."""
    sq, sk = q.shape[0], k.shape[0]
    mask = None
    if causal:
        mask = torch.ones(sq, sk, dtype=torch.bool, device=q.device).tril(diagonal=sk - sq)
    o = F.scaled_dot_product_attention(
        q.transpose(0, 1),
        k.transpose(0, 1),
        v.transpose(0, 1),
        attn_mask=mask,
        scale=scale,
        enable_gqa=True,
    )
    return o.transpose(0, 1)
