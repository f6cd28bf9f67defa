"""The one-row GEMV with its neighbours folded in (engine/fusion.py): the add + RMSNorm before it as
its prologue, SiLU * mul after it as its epilogue.

The GEMV is triton_gemm's BLOCK_M 1 form with the table's tiles: one program owns BLOCK_N weight
rows, reads its first weight tile before waiting for the kernel before (PDL), then streams the
rest. With the norm, each program first reads the whole input row (and the residual) at once,
a few KB from L2, for the row's RMS, and normalises each K step as it loads it; program 0 also
writes the new residual. With SiLU * mul, a program owns gate rows and the up rows that match
them (the fused gate|up weight holds the gate rows first), so BLOCK_N is halved to read as many
bytes.

Every value is rounded where the unfused kernels round it (models/triton_fused.py: the sum, the
normalised row and the weight product in the model dtype; the GEMM's output, then SiLU's), so the
two paths differ only in the order of fp32 sums (the RMS, and the GEMV's per-row sums).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .pdl import launch_options, wait_for_inputs
from .triton_gemm import TileConfig


@triton.jit
def _round(x, dtype: tl.constexpr):
    return x.to(dtype).to(tl.float32)


@triton.jit
def _hidden(X, RES, offs, ok, ADD: tl.constexpr, dtype: tl.constexpr):
    """The norm's input at these columns: x, or x + residual rounded as eager's add is."""
    h = tl.load(X + offs, mask=ok, other=0.0).to(tl.float32)
    if ADD:
        h = _round(h + tl.load(RES + offs, mask=ok, other=0.0).to(tl.float32), dtype)
    return h


@triton.jit
def _x_chunk(X, RES, NW, offs, ok, inv, NORM: tl.constexpr, ADD: tl.constexpr, dtype: tl.constexpr):
    """The GEMV's input at these columns, in fp32: x, or the RMSNorm's output as layers.RMSNorm
    rounds it (normalised, cast, times the weight, cast)."""
    if NORM:
        h = _hidden(X, RES, offs, ok, ADD, dtype)
        w = tl.load(NW + offs, mask=ok, other=0.0).to(tl.float32)
        return _round(w * _round(h * inv, dtype), dtype)
    return tl.load(X + offs, mask=ok, other=0.0).to(tl.float32)


@triton.jit
def _fused_gemv_kernel(
    X,
    RES,
    NW,
    W,
    Y,
    RES_OUT,
    N,
    K,
    stride_wn,
    eps,
    NORM: tl.constexpr,
    ADD: tl.constexpr,
    GLU: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    ROW: tl.constexpr,
    EVEN_K: tl.constexpr,
    PDL: tl.constexpr,
):
    pid = tl.program_id(0)
    dtype = Y.dtype.element_ty
    rn = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    n_ok = rn < N
    w_ptrs = W + rn.to(tl.int64)[:, None] * stride_wn + rk[None, :]
    up = N.to(tl.int64) * stride_wn  # GLU: the up rows sit N rows after their gate rows
    # The weights are constants of the step: the first tile is read before the wait.
    k_ok = rk < K
    w = tl.load(w_ptrs, mask=n_ok[:, None] & k_ok[None, :], other=0.0)
    wu = w
    if GLU:
        wu = tl.load(w_ptrs + up, mask=n_ok[:, None] & k_ok[None, :], other=0.0)
    wait_for_inputs(PDL)
    inv = 1.0
    if NORM:  # the row's RMS from one wide read (one L2 round trip, not one per K step)
        row = tl.arange(0, ROW)
        h = _hidden(X, RES, row, row < K, ADD, dtype)
        inv = tl.rsqrt(tl.sum(h * h, axis=0) / K + eps)
        if ADD:
            if pid == 0:  # the new residual stream, written once
                tl.store(RES_OUT + row, h.to(dtype), mask=row < K)
    x = _x_chunk(X, RES, NW, rk, k_ok, inv, NORM, ADD, dtype)
    acc = w.to(tl.float32) * x[None, :]
    acc_up = acc
    if GLU:
        acc_up = wu.to(tl.float32) * x[None, :]
    for k in range(BLOCK_K, K, BLOCK_K):
        ok = rk + k < K
        if EVEN_K:
            w = tl.load(w_ptrs + k, mask=n_ok[:, None], other=0.0)
        else:
            w = tl.load(w_ptrs + k, mask=n_ok[:, None] & ok[None, :], other=0.0)
        x = _x_chunk(X + k, RES + k, NW + k, rk, ok, inv, NORM, ADD, dtype)
        acc += w.to(tl.float32) * x[None, :]
        if GLU:
            if EVEN_K:
                wu = tl.load(w_ptrs + up + k, mask=n_ok[:, None], other=0.0)
            else:
                wu = tl.load(w_ptrs + up + k, mask=n_ok[:, None] & ok[None, :], other=0.0)
            acc_up += wu.to(tl.float32) * x[None, :]
    y = tl.sum(acc, axis=1)
    if GLU:  # the GEMM's outputs in the model dtype, then silu(gate) rounded as F.silu's is
        gate = _round(y, dtype)
        y = _round(gate / (1.0 + tl.exp(-gate)), dtype) * _round(tl.sum(acc_up, axis=1), dtype)
    tl.store(Y + rn, y.to(dtype), mask=n_ok)


def fused_gemv(
    x: torch.Tensor,
    weight: torch.Tensor,
    config: TileConfig,
    *,
    norm_weight: torch.Tensor | None = None,
    eps: float = 0.0,
    residual: torch.Tensor | None = None,
    glu: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One row: y = act(norm(x [+ residual]) @ weight.T), with the norm when norm_weight is given
    and act = silu(gate) * up over weight's two halves when glu. Returns (y [1, N], the new
    residual x + residual, or None without one). config: the table's GEMV form (block_m 1)."""
    if x.dim() != 2 or x.shape[0] != 1:
        raise ValueError(f"fused_gemv computes one row, got x of shape {tuple(x.shape)}")
    if config.block_m != 1 or config.split_k != 1:
        raise ValueError(f"fused_gemv needs the GEMV form (block_m 1, split_k 1), got {config}")
    n, k = weight.shape
    if x.shape[1] != k or x.stride(1) != 1 or weight.stride(1) != 1:
        raise ValueError(f"x [1, {x.shape[1]}] and weight [{n}, {k}] need matching, unit-stride K")
    if glu and n % 2:
        raise ValueError(f"a gate|up weight has an even row count, got {n}")
    if residual is not None and norm_weight is None:
        raise ValueError("a residual is added only by the norm")
    out_n = n // 2 if glu else n
    block_n = max(1, config.block_n // 2) if glu else config.block_n
    y = torch.empty(1, out_n, dtype=x.dtype, device=x.device)
    res_out = None if residual is None else torch.empty_like(x)
    _fused_gemv_kernel[(triton.cdiv(out_n, block_n),)](
        x,
        x if residual is None else residual,
        x if norm_weight is None else norm_weight,
        weight,
        y,
        y if res_out is None else res_out,
        out_n,
        k,
        weight.stride(0),
        eps,
        NORM=norm_weight is not None,
        ADD=residual is not None,
        GLU=glu,
        BLOCK_N=block_n,
        BLOCK_K=config.block_k,
        ROW=triton.next_power_of_2(k),
        EVEN_K=k % config.block_k == 0,
        num_warps=config.num_warps,
        num_stages=config.num_stages,
        **launch_options(x.device, "gemv"),
    )
    return y, res_out
