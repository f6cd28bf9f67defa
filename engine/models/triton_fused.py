"""The elementwise chains of a decoder layer as Triton kernels: Qwen3's q/k RMSNorm, RoPE and the
paged KV-cache store in one, SiLU-and-mul in another, (add +) RMSNorm in the third. All three are
PDL-aware (engine/pdl.py), so a decode step's small kernels overlap their neighbours' launch.

Between the QKV projection and attention, Inductor emits seven kernels a layer for this chain (each
norm is a reduction of its own, RoPE a cat, the cache write an index_put): at batch 128 they take
~15 us a layer of launch-bound work, ~0.5 ms of a qwen3-4b decode step, and at a 6k-token prefill
they run at a third of the memory bandwidth. Here one program handles BLOCK_T tokens of one head: it
reads the head once, normalises it, rotates it and writes q (or k, plus v, into the cache).

The arithmetic rounds where the eager model does (Attention.qkv_to_cache): the norm in fp32, its
result cast to the model dtype before the weight multiply, RoPE's cos/sin cast to the model dtype
and every product and sum rounded (no FMA contraction across those roundings), so results match
eager bit for bit except the norm's fp32 sum, whose order differs (as it does under Inductor).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..pdl import launch_options, wait_for_inputs


@triton.jit
def _round(x, dtype: tl.constexpr):
    return x.to(dtype).to(tl.float32)


@triton.jit
def _qkv_kernel(
    QKV,
    POS,
    COS_SIN,
    QW,
    KW,
    Q_OUT,
    K_OUT,
    K_CACHE,
    V_CACHE,
    SLOTS,
    num_tokens,
    stride_qkv,
    stride_cs,
    stride_kc,
    stride_vc,
    eps,
    NUM_HEADS: tl.constexpr,
    NUM_KV: tl.constexpr,
    HALF: tl.constexpr,
    HAS_NORM: tl.constexpr,
    STORE: tl.constexpr,
    BLOCK_T: tl.constexpr,
    PDL: tl.constexpr,
):
    wait_for_inputs(PDL)
    pid_t, h = tl.program_id(0), tl.program_id(1)
    dtype = Q_OUT.dtype.element_ty
    tokens = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    valid = tokens < num_tokens
    rows = tokens.to(tl.int64)[:, None]
    cols = tl.arange(0, HALF)[None, :]
    mask = valid[:, None]
    # The head's two halves: q heads, then k heads, then v heads lie one after another in a row.
    head = QKV + rows * stride_qkv + h * (2 * HALF) + cols
    x1 = tl.load(head, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(head + HALF, mask=mask, other=0.0).to(tl.float32)
    is_q = h < NUM_HEADS
    if HAS_NORM:
        if is_q:  # this head's norm weight
            w1 = tl.load(QW + cols).to(tl.float32)
            w2 = tl.load(QW + HALF + cols).to(tl.float32)
        else:
            w1 = tl.load(KW + cols).to(tl.float32)
            w2 = tl.load(KW + HALF + cols).to(tl.float32)
        mean_sq = (tl.sum(x1 * x1, axis=1) + tl.sum(x2 * x2, axis=1)) / (2 * HALF)
        inv = tl.rsqrt(mean_sq + eps)[:, None]
        x1 = _round(w1 * _round(x1 * inv, dtype), dtype)
        x2 = _round(w2 * _round(x2 * inv, dtype), dtype)
    pos = tl.load(POS + tokens, mask=valid, other=0).to(tl.int64)[:, None]
    cos = _round(tl.load(COS_SIN + pos * stride_cs + cols, mask=mask, other=0.0), dtype)
    sin = _round(tl.load(COS_SIN + pos * stride_cs + HALF + cols, mask=mask, other=0.0), dtype)
    o1 = _round(_round(x1 * cos, dtype) - _round(x2 * sin, dtype), dtype).to(dtype)
    o2 = _round(_round(x2 * cos, dtype) + _round(x1 * sin, dtype), dtype).to(dtype)
    if is_q:
        out = Q_OUT + rows * (NUM_HEADS * 2 * HALF) + h * (2 * HALF) + cols
        tl.store(out, o1, mask=mask)
        tl.store(out + HALF, o2, mask=mask)
    else:
        j = h - NUM_HEADS
        out = K_OUT + rows * (NUM_KV * 2 * HALF) + j * (2 * HALF) + cols
        tl.store(out, o1, mask=mask)
        tl.store(out + HALF, o2, mask=mask)
        if STORE:
            slots = tl.load(SLOTS + tokens, mask=valid, other=0).to(tl.int64)[:, None]
            k_dst = K_CACHE + slots * stride_kc + j * (2 * HALF) + cols
            tl.store(k_dst, o1, mask=mask)
            tl.store(k_dst + HALF, o2, mask=mask)
            v_src = QKV + rows * stride_qkv + (NUM_HEADS + NUM_KV + j) * (2 * HALF) + cols
            v_dst = V_CACHE + slots * stride_vc + j * (2 * HALF) + cols
            tl.store(v_dst, tl.load(v_src, mask=mask, other=0.0), mask=mask)
            tl.store(v_dst + HALF, tl.load(v_src + HALF, mask=mask, other=0.0), mask=mask)


def qk_norm_rope_store(
    qkv: torch.Tensor,
    positions: torch.Tensor,
    cos_sin: torch.Tensor,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    q_weight: torch.Tensor | None,
    k_weight: torch.Tensor | None,
    eps: float,
    k_cache: torch.Tensor | None,
    v_cache: torch.Tensor | None,
    slot_mapping: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """qkv [N, (heads + 2 kv_heads) x head_dim] -> q [N, heads, D], k, v [N, kv_heads, D], as
    Attention.qkv_to_cache: q/k RMSNorm when weights are given, neox RoPE from the fp32 cos|sin
    table, k and v written to the paged caches ([blocks, block_size, kv_heads, D]) when given. v is
    a view of qkv."""
    n = qkv.shape[0]
    q = torch.empty(n, num_heads, head_dim, dtype=qkv.dtype, device=qkv.device)
    k = torch.empty(n, num_kv_heads, head_dim, dtype=qkv.dtype, device=qkv.device)
    v = qkv[:, (num_heads + num_kv_heads) * head_dim :].view(n, num_kv_heads, head_dim)
    if n == 0:
        return q, k, v
    # slot s of a contiguous [blocks, block_size, ...] cache starts at s * stride(1)
    store, k_stride, v_stride = False, 0, 0
    if k_cache is not None and v_cache is not None and slot_mapping is not None:
        if not (k_cache.is_contiguous() and v_cache.is_contiguous()):
            raise ValueError("the paged K/V caches must be contiguous")
        store, k_stride, v_stride = True, k_cache.stride(1), v_cache.stride(1)
    has_norm = q_weight is not None and k_weight is not None
    # Enough programs to fill the GPU at decode sizes, 16 tokens each at prefill sizes.
    block_t = min(16, triton.next_power_of_2(max(2, n // 256)))
    grid = (triton.cdiv(n, block_t), num_heads + num_kv_heads)
    _qkv_kernel[grid](
        qkv,
        positions,
        cos_sin,
        q_weight if has_norm else qkv,
        k_weight if has_norm else qkv,
        q,
        k,
        k_cache if store else k,
        v_cache if store else k,
        slot_mapping if store else positions,
        n,
        qkv.stride(0),
        cos_sin.stride(0),
        k_stride,
        v_stride,
        eps,
        NUM_HEADS=num_heads,
        NUM_KV=num_kv_heads,
        HALF=head_dim // 2,
        HAS_NORM=has_norm,
        STORE=store,
        BLOCK_T=block_t,
        num_warps=1 if block_t <= 4 else 4,
        # No a*b+c contraction into FMA: it skips the rounding eager does between the two (RoPE's
        # products), which changed 14% of bf16 q/k values by one step on an H100.
        enable_fp_fusion=False,
        **launch_options(qkv.device, "qk"),
    )
    return q, k, v


@triton.jit
def _silu_and_mul_kernel(X, OUT, inter, stride_x, BLOCK: tl.constexpr, PDL: tl.constexpr):
    wait_for_inputs(PDL)
    row, block = tl.program_id(0).to(tl.int64), tl.program_id(1)
    dtype = OUT.dtype.element_ty
    cols = block * BLOCK + tl.arange(0, BLOCK)
    mask = cols < inter
    gate = tl.load(X + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(X + row * stride_x + inter + cols, mask=mask, other=0.0).to(tl.float32)
    act = _round(gate / (1.0 + tl.exp(-gate)), dtype)  # silu, rounded as F.silu's output is
    tl.store(OUT + row * inter + cols, (act * up).to(dtype), mask=mask)


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """[N, 2 I] gate|up -> silu(gate) * up [N, I] (SiluAndMul): one pass, where Inductor's kernel
    for the dynamic-shape chunk runs at a third of the memory bandwidth on a long prefill."""
    n, inter = x.shape[0], x.shape[1] // 2
    out = torch.empty(n, inter, dtype=x.dtype, device=x.device)
    if n:
        grid = (n, triton.cdiv(inter, 1024))
        _silu_and_mul_kernel[grid](
            x,
            out,
            inter,
            x.stride(0),
            BLOCK=1024,
            enable_fp_fusion=False,
            **launch_options(x.device, "silu"),
        )
    return out


@triton.jit
def _rms_norm_kernel(
    X,
    RES,
    W,
    OUT,
    RES_OUT,
    dim,
    stride_x,
    stride_r,
    eps,
    ADD: tl.constexpr,
    BLOCK: tl.constexpr,
    PDL: tl.constexpr,
):
    wait_for_inputs(PDL)
    row = tl.program_id(0).to(tl.int64)
    dtype = OUT.dtype.element_ty
    cols = tl.arange(0, BLOCK)
    mask = cols < dim
    x = tl.load(X + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    if ADD:  # vLLM's fused residual: the sum, rounded as eager's add is, is the new residual
        x = _round(
            x + tl.load(RES + row * stride_r + cols, mask=mask, other=0.0).to(tl.float32), dtype
        )
        tl.store(RES_OUT + row * dim + cols, x.to(dtype), mask=mask)
    inv = tl.rsqrt(tl.sum(x * x, axis=0) / dim + eps)
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(OUT + row * dim + cols, (w * _round(x * inv, dtype)).to(dtype), mask=mask)


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """RMSNorm over the last dim as layers.RMSNorm computes it (the norm in fp32, cast back, then
    the weight multiply); with a residual, (norm(x + residual), x + residual). One program a row,
    where Inductor's kernel is not PDL-aware (and a decode step has two a layer)."""
    dim = x.shape[-1]
    x2 = x.reshape(-1, dim)
    res = x2 if residual is None else residual.reshape(-1, dim)
    if x2.stride(-1) != 1 or res.stride(-1) != 1:
        raise ValueError("rms_norm needs a contiguous last dim")
    n = x2.shape[0]
    out = torch.empty(n, dim, dtype=x.dtype, device=x.device)
    res_out = out if residual is None else torch.empty_like(out)
    if n:
        block = triton.next_power_of_2(dim)
        _rms_norm_kernel[(n,)](
            x2,
            res,
            weight,
            out,
            res_out,
            dim,
            x2.stride(0),
            res.stride(0),
            eps,
            ADD=residual is not None,
            BLOCK=block,
            num_warps=min(8, max(1, block // 512)),
            enable_fp_fusion=False,
            **launch_options(x.device, "norm"),
        )
    out = out.view(x.shape)
    return out if residual is None else (out, res_out.view(x.shape))
