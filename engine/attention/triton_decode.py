"""Paged decode attention in Triton: one query token per row reads its K/V pages in place
through the block table.

One program per (row, KV head, split) handles all query heads of that KV head (GQA), so every page
is read once per KV head; the group dim is padded to 16 so QK^T and PV are tensor-core dots. Split-K
(flash-decoding): each row's context is cut into `num_splits` equal spans of whole tiles, each
program keeps an fp32 online softmax over its span, and a small kernel merges the spans by their
log-sum-exp. The split count comes from shapes only (batch, KV heads, table width, SM count), never
from context_lens values, so the launch is CUDA-graph capturable.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from ..pdl import launch_options, wait_for_inputs

BLOCK_N = 64  # tokens per tile; a tile may span several pages (block_size < 64) or part of one
MAX_SPLITS = 16
_LOG2E = 1.4426950408889634


@triton.jit
def _decode_kernel(
    Q,
    K,
    V,
    BT,
    CTX,
    O,  # noqa: E741 -- attention's Q, K, V, O, as the compile test names them
    PART_O,
    PART_LSE,
    stride_qb,
    stride_qh,
    stride_kb,
    stride_ks,
    stride_kh,
    stride_vb,
    stride_vs,
    stride_vh,
    stride_btb,
    stride_ob,
    stride_oh,
    qk_scale,
    num_splits,
    GROUP: tl.constexpr,
    BLOCK_G: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    PAGE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SPLIT: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    UPCAST: tl.constexpr,
    PDL: tl.constexpr,
):
    wait_for_inputs(PDL)
    b, kvh, s = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    ctx = tl.load(CTX + b)
    # This split's span: whole tiles, so spans share no tile; a short row's last splits are empty.
    tiles_per_split = tl.cdiv(tl.cdiv(ctx, BLOCK_N), num_splits)
    start = s * tiles_per_split * BLOCK_N
    end = tl.minimum(start + tiles_per_split * BLOCK_N, ctx)

    g = tl.arange(0, BLOCK_G)
    d = tl.arange(0, HEAD_DIM)
    heads = kvh * GROUP + g
    g_mask = g < GROUP
    q = tl.load(
        Q + b * stride_qb + heads[:, None] * stride_qh + d[None, :], mask=g_mask[:, None], other=0.0
    )
    if UPCAST:
        q = q.to(tl.float32)

    m_i = tl.full([BLOCK_G], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_G], tl.float32)
    acc = tl.zeros([BLOCK_G, HEAD_DIM], tl.float32)
    for n0 in range(start, end, BLOCK_N):
        offs = n0 + tl.arange(0, BLOCK_N)
        valid = offs < end
        # int64: page * stride overflows int32 once a layer's pool passes 2^31 elements.
        page = tl.load(BT + b * stride_btb + offs // PAGE, mask=valid, other=0).to(tl.int64)
        within = offs % PAGE
        k = tl.load(
            K
            + page[:, None] * stride_kb
            + within[:, None] * stride_ks
            + kvh * stride_kh
            + d[None, :],
            mask=valid[:, None],
            other=0.0,
        )
        if UPCAST:
            k = k.to(tl.float32)
        qk = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * qk_scale  # log2 domain
        qk = tl.where(valid[None, :], qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))  # finite: a tile's first token is always valid
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(qk - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(
            V
            + page[:, None] * stride_vb
            + within[:, None] * stride_vs
            + kvh * stride_vh
            + d[None, :],
            mask=valid[:, None],
            other=0.0,
        )
        p = p.to(v.dtype)  # round P as the tensor-core dot sees it
        if UPCAST:
            p, v = p.to(tl.float32), v.to(tl.float32)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision=DOT_PRECISION)
        m_i = m_new

    # An empty span (context 0, or a trailing split) leaves l_i = 0: write zeros, not 0/0.
    has = l_i > 0
    out = acc / tl.where(has, l_i, 1.0)[:, None]
    if SPLIT:
        # PART_* are [B, heads, splits(, D)]
        part = (b * tl.num_programs(1) * GROUP + heads) * num_splits + s
        tl.store(PART_O + part[:, None] * HEAD_DIM + d[None, :], out, mask=g_mask[:, None])
        tl.store(
            PART_LSE + part,
            tl.where(has, m_i + tl.log2(tl.where(has, l_i, 1.0)), float("-inf")),
            mask=g_mask,
        )
    else:
        tl.store(
            O + b * stride_ob + heads[:, None] * stride_oh + d[None, :],
            out.to(O.dtype.element_ty),
            mask=g_mask[:, None],
        )


@triton.jit
def _merge_kernel(
    PART_O,
    PART_LSE,
    O,  # noqa: E741 -- attention's Q, K, V, O, as the compile test names them
    stride_ob,
    stride_oh,
    num_splits,
    HEAD_DIM: tl.constexpr,
    BLOCK_S: tl.constexpr,
    PDL: tl.constexpr,
):
    wait_for_inputs(PDL)
    b, h = tl.program_id(0), tl.program_id(1)
    row = b * tl.num_programs(1) + h
    s = tl.arange(0, BLOCK_S)
    d = tl.arange(0, HEAD_DIM)
    s_mask = s < num_splits
    lse = tl.load(PART_LSE + row * num_splits + s, mask=s_mask, other=float("-inf"))
    m = tl.max(lse, 0)
    # All spans empty (context 0): every weight is exp2(-inf) = 0, not NaN.
    m = tl.where(m == float("-inf"), 0.0, m)
    w = tl.exp2(lse - m)
    part = tl.load(
        PART_O + (row * num_splits + s)[:, None] * HEAD_DIM + d[None, :],
        mask=s_mask[:, None],
        other=0.0,
    )
    total = tl.sum(w, 0)
    out = tl.sum(part * w[:, None], 0) / tl.where(total > 0, total, 1.0)
    tl.store(O + b * stride_ob + h * stride_oh + d, out.to(O.dtype.element_ty))


# Triton's CPU interpreter (TRITON_INTERPRET=1, read when the kernels above were decorated)
# multiplies bf16 as raw uint16 bits in tl.dot; there the kernel upcasts dot operands to fp32
# (bf16-rounded values, so the same math).
_INTERPRETED = bool(triton.knobs.runtime.interpret)


@functools.cache
def _sm_count(device: torch.device) -> int:
    if device.type != "cuda":
        return 4  # the interpreter on CPU: a few splits, so tests cover the merge path
    return torch.cuda.get_device_properties(device).multi_processor_count


def default_num_splits(
    batch: int,
    kv_heads: int,
    max_blocks: int,
    block_size: int,
    device: torch.device,
    block_n: int = BLOCK_N,
) -> int:
    """Enough (row, KV head, split) programs to fill every SM once, at most one split per tile."""
    max_tiles = triton.cdiv(max_blocks * block_size, block_n)
    want = triton.cdiv(_sm_count(device), batch * kv_heads)
    return max(1, min(want, max_tiles, MAX_SPLITS))


def launch_shape(batch: int, kv_heads: int, device: torch.device) -> tuple[int, int, int]:
    """(block_n, num_warps, num_stages) from shapes alone (graph-capturable). Many (row, KV head)
    programs, several per SM: small tiles and 2 warps, so more programs are resident at once and
    their page loads overlap (H100, qwen3-4b shapes at batch 128: 17% faster at 82 tokens of
    context, 2-4% at 512-2048); fewer programs: 64-token tiles, which long contexts need
    (benchmarks.decode_attention_tune)."""
    if batch * kv_heads >= 4 * _sm_count(device):
        return 16, 2, 2
    return BLOCK_N, 4, 2


def paged_decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    num_splits: int | None = None,
    block_n: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
) -> torch.Tensor:
    """q [B, heads, D]; k/v_cache [num_blocks, block_size, kv_heads, D];
    block_tables [B, max_blocks] int32; context_lens [B] int32 (the current token included, already
    in the cache). Returns [B, heads, D] in q's dtype. Rows with context 0 get zeros. block_n,
    num_warps, num_stages: the tile and launch shape, else launch_shape's."""
    batch, heads, head_dim = q.shape
    _, block_size, kv_heads, _ = k_cache.shape
    group = heads // kv_heads
    if (
        heads % kv_heads
        or head_dim & (head_dim - 1)
        or block_size & (block_size - 1)
        or head_dim < 16
    ):
        raise ValueError(
            f"unsupported shape: {heads} heads, {kv_heads} kv heads, head_dim {head_dim}, "
            f"block_size {block_size} (need power-of-two head_dim >= 16 and block_size)"
        )
    if q.stride(-1) != 1 or k_cache.stride(-1) != 1 or v_cache.stride(-1) != 1:
        raise ValueError("q and the caches need a contiguous last dim")
    default = launch_shape(batch, kv_heads, q.device)
    block_n = block_n or default[0]
    num_warps, num_stages = num_warps or default[1], num_stages or default[2]
    if num_splits is None:
        num_splits = default_num_splits(
            batch, kv_heads, block_tables.shape[1], block_size, q.device, block_n
        )
    out = torch.empty_like(q)
    if batch == 0:
        return out
    split = num_splits > 1
    if split:
        part_o = torch.empty(
            batch, heads, num_splits, head_dim, device=q.device, dtype=torch.float32
        )
        part_lse = torch.empty(batch, heads, num_splits, device=q.device, dtype=torch.float32)
    else:
        part_o = part_lse = out  # unused
    _decode_kernel[(batch, kv_heads, num_splits)](
        q,
        k_cache,
        v_cache,
        block_tables,
        context_lens,
        out,
        part_o,
        part_lse,
        q.stride(0),
        q.stride(1),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        v_cache.stride(0),
        v_cache.stride(1),
        v_cache.stride(2),
        block_tables.stride(0),
        out.stride(0),
        out.stride(1),
        scale * _LOG2E,
        num_splits,
        GROUP=group,
        BLOCK_G=max(16, triton.next_power_of_2(group)),
        HEAD_DIM=head_dim,
        PAGE=block_size,
        BLOCK_N=block_n,
        SPLIT=split,
        DOT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
        UPCAST=_INTERPRETED and q.dtype != torch.float32,
        num_warps=num_warps,
        num_stages=num_stages,
        **launch_options(q.device, "attention"),
    )
    if split:
        _merge_kernel[(batch, heads)](
            part_o,
            part_lse,
            out,
            out.stride(0),
            out.stride(1),
            num_splits,
            HEAD_DIM=head_dim,
            BLOCK_S=triton.next_power_of_2(num_splits),
            num_warps=1,
            **launch_options(q.device, "attention"),
        )
    return out
