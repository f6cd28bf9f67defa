"""Skinny GEMMs, y = x @ w.T for a few rows of x, as one Triton kernel whose tiles a per-GPU table
chose (engine/linear.py loads it; benchmarks/gemm_tune.py writes it).

A decode step at small batch streams every weight once and does little arithmetic on it, so its
GEMMs should run at the memory bandwidth. cuBLAS's picks for these shapes reach ~80% of it on an
H200 (qwen3-4b at batch 1) and add a split-K reduction kernel for the row-parallel projections.
Here one program owns BLOCK_N output columns and reads their weight rows end to end: enough programs
keep enough bytes in flight without splitting K, so there is no second kernel and no atomics, and
each output row's sum runs in the same order whatever the batch (the same tokens at depth 1 and 2).

BLOCK_M 1 is the GEMV form for one row (products accumulated in registers, one reduction at the
end); otherwise tl.dot on BLOCK_M rows (at least 16: the MMA's smallest tile; padding rows cost no
memory traffic). Programs are ordered with the row blocks fastest, so the programs that read one
weight tile run together and share it through L2. Launched with PDL (engine/pdl.py), the GEMV form
starts streaming its weights while the kernel before it is still running.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import triton
import triton.language as tl

from .pdl import launch_options, wait_for_inputs


@dataclass(frozen=True)
class TileConfig:
    """One launch shape: rows, output columns and reduction depth per program, how many programs
    split K between them, and its warps and software-pipeline stages."""

    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int
    split_k: int = 1

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


@triton.jit
def _accumulate(acc, x, w, BLOCK_M: tl.constexpr):
    if BLOCK_M == 1:
        acc += w.to(tl.float32) * x.to(tl.float32)  # x is [1, BLOCK_K]: broadcast over rows
    else:
        acc = tl.dot(x, tl.trans(w), acc)
    return acc


@triton.jit
def _skinny_kernel(
    X,
    W,
    Y,
    WS,
    LOCKS,
    M,
    N,
    K,
    stride_xm,
    stride_wn,
    stride_ym,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    SPLIT_K: tl.constexpr,
    EVEN_K: tl.constexpr,
    PDL: tl.constexpr,
):
    num_m = tl.cdiv(M, BLOCK_M)
    tile, pid_k = tl.program_id(0), tl.program_id(1)
    pid_m, pid_n = tile % num_m, tile // num_m
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    # This program's share of K: whole BLOCK_K steps, the last share shorter.
    k_steps = tl.cdiv(tl.cdiv(K, BLOCK_K), SPLIT_K)
    k_begin = pid_k * k_steps * BLOCK_K
    k_end = tl.minimum(K, k_begin + k_steps * BLOCK_K)
    rk = k_begin + tl.arange(0, BLOCK_K)
    m_ok, n_ok = rm < M, rn < N
    x_ptrs = X + rm.to(tl.int64)[:, None] * stride_xm + rk[None, :]
    w_ptrs = W + rn.to(tl.int64)[:, None] * stride_wn + rk[None, :]
    if BLOCK_M == 1:
        acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    k_first = k_begin
    if PDL and BLOCK_M == 1:
        # The weights are constants of the step: the GEMV form reads its first tile before waiting
        # for the kernel before, so its weight stream starts under that kernel's tail. (The MMA
        # form keeps the loop its tiles were tuned with: peeled, it was slower at 32 rows.)
        k_ok = (rk < k_end)[None, :]
        w = tl.load(w_ptrs, mask=n_ok[:, None] & k_ok, other=0.0)
        wait_for_inputs(PDL)
        x = tl.load(x_ptrs, mask=m_ok[:, None] & k_ok, other=0.0)
        acc = _accumulate(acc, x, w, BLOCK_M)
        x_ptrs += BLOCK_K
        w_ptrs += BLOCK_K
        k_first += BLOCK_K
    else:
        wait_for_inputs(PDL)
    for k in range(k_first, k_end, BLOCK_K):
        if EVEN_K:
            x = tl.load(x_ptrs, mask=m_ok[:, None], other=0.0)
            w = tl.load(w_ptrs, mask=n_ok[:, None], other=0.0)
        else:
            k_ok = (rk + (k - k_begin) < k_end)[None, :]
            x = tl.load(x_ptrs, mask=m_ok[:, None] & k_ok, other=0.0)
            w = tl.load(w_ptrs, mask=n_ok[:, None] & k_ok, other=0.0)
        acc = _accumulate(acc, x, w, BLOCK_M)
        x_ptrs += BLOCK_K
        w_ptrs += BLOCK_K
    if BLOCK_M == 1:
        out = tl.sum(acc, axis=1)[None, :]
    else:
        out = acc
    y_ptrs = Y + rm.to(tl.int64)[:, None] * stride_ym + rn[None, :]
    y_mask = m_ok[:, None] & n_ok[None, :]
    if SPLIT_K == 1:
        tl.store(y_ptrs, out.to(Y.dtype.element_ty), mask=y_mask)
    else:
        # Each share's partial goes to the workspace; the last program of the tile to finish
        # adds them in share order (the same sum whichever finished last) and resets the tile's
        # counter for the next call. No second kernel, no float atomics.
        num_tiles = tl.num_programs(0)
        part = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
        tl.store(WS + (pid_k * num_tiles + tile) * (BLOCK_M * BLOCK_N) + part, out)
        tl.debug_barrier()  # every thread's partial is written before the counter moves
        done = tl.atomic_add(LOCKS + tile, 1, sem="acq_rel")
        if done == SPLIT_K - 1:
            total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for s in range(SPLIT_K):
                ws = WS + (s * num_tiles + tile) * (BLOCK_M * BLOCK_N) + part
                total += tl.load(ws, cache_modifier=".cg")  # from L2: other SMs wrote it
            tl.store(y_ptrs, total.to(Y.dtype.element_ty), mask=y_mask)
            tl.atomic_xchg(LOCKS + tile, 0)


_counters: dict[torch.device, list[torch.Tensor]] = {}


def _tile_counters(device: torch.device, tiles: int) -> torch.Tensor:
    """Zeroed int32 counters, one per output tile, kept per device (the kernel leaves them zero).
    One stream computes GEMMs per device, so concurrent kernels never share them. A larger set
    replaces a smaller one, which stays allocated: graphs captured with it still point there."""
    kept = _counters.setdefault(device, [])
    if not kept or kept[-1].numel() < tiles:
        kept.append(torch.zeros(max(tiles, 1 << 16), dtype=torch.int32, device=device))
    return kept[-1]


def skinny_matmul(
    x: torch.Tensor, w: torch.Tensor, config: TileConfig, out: torch.Tensor | None = None
) -> torch.Tensor:
    """x [M, K] @ w[N, K].T -> [M, N] in x's dtype (into `out` when given), with config's tiles.
    Both operands must have unit stride along K."""
    m, k = x.shape
    n = w.shape[0]
    if w.shape[1] != k:
        raise ValueError(f"x has {k} columns, w has {w.shape[1]}")
    if x.stride(1) != 1 or w.stride(1) != 1:
        raise ValueError("skinny_matmul needs unit stride along K")
    if config.block_m == 1 and m != 1:
        raise ValueError(f"a BLOCK_M 1 config computes one row, got {m}")
    y = torch.empty(m, n, dtype=x.dtype, device=x.device) if out is None else out
    if m == 0:
        return y
    tiles = triton.cdiv(m, config.block_m) * triton.cdiv(n, config.block_n)
    split = config.split_k
    workspace = counters = y  # unused at split 1
    if split > 1:
        workspace = torch.empty(
            split * tiles * config.block_m * config.block_n, dtype=torch.float32, device=x.device
        )
        counters = _tile_counters(x.device, tiles)
    _skinny_kernel[(tiles, split)](
        x,
        w,
        y,
        workspace,
        counters,
        m,
        n,
        k,
        x.stride(0),
        w.stride(0),
        y.stride(0),
        BLOCK_M=config.block_m,
        BLOCK_N=config.block_n,
        BLOCK_K=config.block_k,
        SPLIT_K=split,
        EVEN_K=k % config.block_k == 0,
        num_warps=config.num_warps,
        num_stages=config.num_stages,
        **launch_options(x.device, "mma" if config.block_m > 1 else "gemv"),
    )
    return y
