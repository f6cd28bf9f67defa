"""Varlen causal prefill attention in Triton, shaped for CUDA-graph capture.

Queries are tiled over the flat token stream, not per sequence: program (tile, head) covers tokens
[tile * BLOCK_M, (tile + 1) * BLOCK_M) whatever sequences they belong to, and finds each token's
sequence start on the device from cu_seqlens. So the grid depends only on the number of tokens the
buffers hold (a graph's token bucket), never on how many sequences there are or how long they are:
padded sequences (zero length, cu_seqlens repeating its last value) and padded tokens (past
cu_seqlens[-1]) cost nothing but their own tile. A tile's keys run from the earliest sequence start
among its tokens to its last token; each token sees keys of its own sequence up to itself (causal),
so a tile spanning short prompts reads only their keys.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK_M = 64  # query tokens per program
BLOCK_N = 64  # key tokens per inner step
BLOCK_CU = 64  # cu_seqlens entries read per step of the sequence-start search
_LOG2E = 1.4426950408889634
_BIG = tl.constexpr(2**31 - 1)  # a plain global is refused by the compiler (not the interpreter)


@triton.jit
def _prefill_kernel(
    Q,
    K,
    V,
    O,  # noqa: E741 -- attention's Q, K, V, O, as the compile test names them
    CU,
    num_seqs,
    num_tokens,
    stride_qt,
    stride_qh,
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    stride_ot,
    stride_oh,
    qk_scale,
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_CU: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    UPCAST: tl.constexpr,
):
    tile, h = tl.program_id(0), tl.program_id(1)
    kvh = h // GROUP
    tokens = tile * BLOCK_M + tl.arange(0, BLOCK_M)
    total = tl.load(CU + num_seqs)  # real tokens; the rest of the buffers is padding
    valid = tokens < total
    # Each token's sequence start: the largest cu_seqlens entry at or below it (cu_seqlens[0] = 0).
    start = tl.zeros([BLOCK_M], tl.int32)
    for c0 in range(0, num_seqs + 1, BLOCK_CU):
        idx = c0 + tl.arange(0, BLOCK_CU)
        cu = tl.load(CU + idx, mask=idx <= num_seqs, other=_BIG)
        below = cu[None, :] <= tokens[:, None]
        start = tl.maximum(start, tl.max(tl.where(below, cu[None, :], 0), 1))
    lo = tl.min(tl.where(valid, start, _BIG), 0)
    hi = tl.minimum(tile * BLOCK_M + BLOCK_M, total)

    d = tl.arange(0, HEAD_DIM)
    q = tl.load(
        Q + tokens[:, None].to(tl.int64) * stride_qt + h * stride_qh + d[None, :],
        mask=valid[:, None],
        other=0.0,
    )
    if UPCAST:
        q = q.to(tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    for n0 in range(lo, hi, BLOCK_N):
        keys = n0 + tl.arange(0, BLOCK_N)
        in_range = keys < hi
        k = tl.load(
            K + keys[:, None].to(tl.int64) * stride_kt + kvh * stride_kh + d[None, :],
            mask=in_range[:, None],
            other=0.0,
        )
        if UPCAST:
            k = k.to(tl.float32)
        qk = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * qk_scale  # log2 domain
        seen = (
            (keys[None, :] <= tokens[:, None])
            & (keys[None, :] >= start[:, None])
            & valid[:, None]
            & in_range[None, :]
        )
        qk = tl.where(seen, qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        # A token may see none of this block (it starts a later sequence): exp2 finite, weights 0.
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp2(m_i - m_safe)
        p = tl.exp2(qk - m_safe[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(
            V + keys[:, None].to(tl.int64) * stride_vt + kvh * stride_vh + d[None, :],
            mask=in_range[:, None],
            other=0.0,
        )
        p = p.to(v.dtype)  # round P as the tensor-core dot sees it
        if UPCAST:
            p, v = p.to(tl.float32), v.to(tl.float32)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision=DOT_PRECISION)
        m_i = m_new
    out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]  # padded tokens: zeros
    tl.store(
        O + tokens[:, None].to(tl.int64) * stride_ot + h * stride_oh + d[None, :],
        out.to(O.dtype.element_ty),
        mask=(tokens < num_tokens)[:, None],
    )


# Triton's CPU interpreter multiplies bf16 as raw bits in tl.dot (see triton_decode.py): upcast.
_INTERPRETED = bool(triton.knobs.runtime.interpret)


def varlen_prefill_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor, scale: float
) -> torch.Tensor:
    """q [T, heads, D], k/v [T, kv_heads, D] flat over the sequences of cu_seqlens [R + 1] (int32,
    on the device, non-decreasing from 0; rows may be empty; tokens past cu_seqlens[-1] are padding
    and get zeros). Causal within each sequence. Returns [T, heads, D] in q's dtype. No host sync:
    capturable."""
    num_tokens, heads, head_dim = q.shape
    kv_heads = k.shape[1]
    if heads % kv_heads or head_dim & (head_dim - 1) or head_dim < 16:
        raise ValueError(
            f"unsupported shape: {heads} heads, {kv_heads} kv heads, head_dim {head_dim} "
            "(need kv heads dividing heads and a power-of-two head_dim >= 16)"
        )
    if q.stride(-1) != 1 or k.stride(-1) != 1 or v.stride(-1) != 1:
        raise ValueError("q, k and v need a contiguous last dim")
    out = torch.empty_like(q)
    if num_tokens == 0:
        return out
    _prefill_kernel[(triton.cdiv(num_tokens, BLOCK_M), heads)](
        q,
        k,
        v,
        out,
        cu_seqlens,
        cu_seqlens.shape[0] - 1,
        num_tokens,
        q.stride(0),
        q.stride(1),
        k.stride(0),
        k.stride(1),
        v.stride(0),
        v.stride(1),
        out.stride(0),
        out.stride(1),
        scale * _LOG2E,
        GROUP=heads // kv_heads,
        HEAD_DIM=head_dim,
        BLOCK_M=BLOCK_M,
        BLOCK_N=BLOCK_N,
        BLOCK_CU=BLOCK_CU,
        DOT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
        UPCAST=_INTERPRETED and q.dtype != torch.float32,
        num_warps=4,
        num_stages=2,
    )
    return out
