"""Qwen3's per-head q/k RMSNorm and neox RoPE as Triton device functions, rounded where the eager
model rounds (Attention.qkv_to_cache): shared by the q/k kernel (models/triton_fused.py) and the
decode attention that folds it in (attention/triton_decode.py, the `rope` fusion).

A head is handled whole, [rows, D]: the rotation's partner of column d is column (d + D/2) % D,
loaded a second time rather than split into halves, so the result is a plain [rows, D] tile that a
tensor-core dot can take without a join.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def round_to(x, dtype: tl.constexpr):
    """x rounded to dtype and back to fp32: where eager stores an intermediate tensor."""
    return x.to(dtype).to(tl.float32)


@triton.jit
def norm_rope_head(
    X,
    W,
    cos_sin,
    rows,
    row_mask,
    eps,
    HEAD_DIM: tl.constexpr,
    HAS_NORM: tl.constexpr,
    dtype: tl.constexpr,
):
    """Heads at X + rows[:, None] * HEAD_DIM (rows [R] of head offsets) -> [R, HEAD_DIM] in fp32,
    holding dtype values: RMSNorm with weight W (if HAS_NORM), then RoPE with cos_sin, the
    position's [cos | sin] row pointer (fp32 table, HEAD_DIM wide)."""
    half: tl.constexpr = HEAD_DIM // 2
    d = tl.arange(0, HEAD_DIM)
    partner = (d + half) % HEAD_DIM
    mask = row_mask[:, None]
    x = tl.load(X + rows[:, None] * HEAD_DIM + d[None, :], mask=mask, other=0.0).to(tl.float32)
    xp = tl.load(X + rows[:, None] * HEAD_DIM + partner[None, :], mask=mask, other=0.0)
    xp = xp.to(tl.float32)
    if HAS_NORM:
        inv = tl.rsqrt(tl.sum(x * x, axis=1) / HEAD_DIM + eps)[:, None]
        x = round_to(tl.load(W + d).to(tl.float32)[None, :] * round_to(x * inv, dtype), dtype)
        xp = round_to(
            tl.load(W + partner).to(tl.float32)[None, :] * round_to(xp * inv, dtype), dtype
        )
    cos = round_to(tl.load(cos_sin + d % half), dtype)[None, :]
    sin = round_to(tl.load(cos_sin + half + d % half), dtype)[None, :]
    # first half: x1 cos - x2 sin; second half: x2 cos + x1 sin (each product rounded, as eager)
    rotated = round_to(xp * sin, dtype)
    rotated = tl.where(d[None, :] < half, -rotated, rotated)
    return round_to(round_to(x * cos, dtype) + rotated, dtype)
