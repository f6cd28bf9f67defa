"""Skinny GEMMs, y = x @ w.T for a few rows of x, as one Triton kernel whose tiles a per-GPU table
chose (engine/linear.py loads it; benchmarks/gemm_tune.py writes it).

A decode step at small batch streams every weight once and does little arithmetic on it, so its
GEMMs should run at the memory bandwidth. cuBLAS's picks for these shapes reach ~80% of it on an
H200 (qwen3-4b at batch 1) and add a split-K reduction kernel for the row-parallel projections.
Here one program owns BLOCK_N output columns and reads their weight rows end to end: enough programs
keep enough bytes in flight without splitting K, so there is no second kernel and no atomics, and
each output row's sum runs in the same order whatever the batch (the same tokens at depth 1 and 2).

BLOCK_M 1 is the GEMV form for one row (products accumulated in registers, one reduction at the
end). Its stream-K schedule (`stream_k` programs per SM) cuts the weight's K steps into equal
shares, one a program, that cross tile boundaries: with one program a tile, a small projection's
tiles fall unevenly on the SMs (qwen3-4b's down projection: 320 tiles on 132 SMs), and its last ones
run while most SMs are idle. Otherwise tl.dot on BLOCK_M rows (at least 16: the MMA's smallest
tile; padding rows cost no memory traffic). Programs are ordered with the row blocks fastest, so
the programs that read one weight tile run together and share it through L2. Launched with PDL
(engine/pdl.py), the GEMV forms start streaming their weights while the kernel before them is still
running.
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
    stream_k: int = 0  # > 0: the one-row stream-K schedule, this many programs per SM

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


@triton.jit
def _segment(acc, X, W, rn, n_ok, K, stride_wn, s_begin, s_end, BLOCK_K: tl.constexpr):
    """acc plus this tile's products over K steps [s_begin, s_end)."""
    rk0 = tl.arange(0, BLOCK_K)
    for s in range(s_begin, s_end):
        rk = s * BLOCK_K + rk0
        k_ok = rk < K
        w = tl.load(
            W + rn.to(tl.int64)[:, None] * stride_wn + rk[None, :],
            mask=n_ok[:, None] & k_ok[None, :],
            other=0.0,
        )
        x = tl.load(X + rk[None, :], mask=k_ok[None, :], other=0.0)
        acc += w.to(tl.float32) * x.to(tl.float32)
    return acc


@triton.jit
def _hand_in(acc, Y, WS, LOCKS, tile, ks, ke, k_steps, total, N, BLOCK_N: tl.constexpr):
    """Stores a tile's sum over K steps [ks, ke): whole, or as one program's share of it, the
    last share in adding all of them in program order (fixed by the shapes: the same sum
    whichever program finished last) and resetting the tile's counter."""
    programs = tl.num_programs(0)
    rn0 = tl.arange(0, BLOCK_N)
    rn = tile * BLOCK_N + rn0
    out = tl.sum(acc, axis=1)
    if (ks == 0) & (ke == k_steps):
        tl.store(Y + rn, out.to(Y.dtype.element_ty), mask=rn < N)
    else:
        pid = tl.program_id(0)
        # The programs holding this tile's first and last K step: program p starts at p*T//P.
        # (int64: the products pass 2^31 for a large vocabulary's LM head)
        first_step = tile.to(tl.int64) * k_steps
        p_first = ((first_step + 1) * programs + total - 1) // total - 1
        p_last = ((first_step + k_steps) * programs + total - 1) // total - 1
        # a program's share of its first tile in slot 0, of its last (when another) in slot 1
        slot = tl.where(pid.to(tl.int64) * total // programs >= first_step, 0, 1)
        tl.store(WS + (pid * 2 + slot) * BLOCK_N + rn0, out)
        tl.debug_barrier()  # every thread's share is written before the counter moves
        done = tl.atomic_add(LOCKS + tile, 1, sem="acq_rel")
        if done == p_last - p_first:
            sum_ = tl.zeros((BLOCK_N,), dtype=tl.float32)
            for p in range(p_first, p_last + 1):
                first = (p * total // programs) // k_steps == tile  # p is int64 here
                at = WS + (p * 2 + tl.where(first, 0, 1)) * BLOCK_N + rn0
                sum_ += tl.load(at, cache_modifier=".cg")  # from L2: other SMs wrote it
            tl.store(Y + rn, sum_.to(Y.dtype.element_ty), mask=rn < N)
            tl.atomic_xchg(LOCKS + tile, 0)


@triton.jit
def _stream_k_gemv_kernel(
    X,
    W,
    Y,
    WS,
    LOCKS,
    N,
    K,
    stride_wn,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    PDL: tl.constexpr,
):
    programs = tl.num_programs(0)
    pid = tl.program_id(0)
    k_steps = tl.cdiv(K, BLOCK_K)
    total = tl.cdiv(N, BLOCK_N) * k_steps
    begin = (pid.to(tl.int64) * total // programs).to(tl.int32)
    end = ((pid + 1).to(tl.int64) * total // programs).to(tl.int32)
    rn0 = tl.arange(0, BLOCK_N)
    rk0 = tl.arange(0, BLOCK_K)
    # Every program has at least one K step (the launch asks no more programs than steps). The
    # first alone: its weights are read before the PDL wait (they are constants of the step).
    tile = begin // k_steps
    ks = begin - tile * k_steps
    ke = tl.minimum(end - tile * k_steps, k_steps)
    rn = tile * BLOCK_N + rn0
    n_ok = rn < N
    rk = ks * BLOCK_K + rk0
    k_ok = (rk < K)[None, :]
    w = tl.load(
        W + rn.to(tl.int64)[:, None] * stride_wn + rk[None, :], mask=n_ok[:, None] & k_ok, other=0.0
    )
    wait_for_inputs(PDL)
    x = tl.load(X + rk[None, :], mask=k_ok, other=0.0)
    acc = w.to(tl.float32) * x.to(tl.float32)
    acc = _segment(acc, X, W, rn, n_ok, K, stride_wn, ks + 1, ke, BLOCK_K)
    _hand_in(acc, Y, WS, LOCKS, tile, ks, ke, k_steps, total, N, BLOCK_N)
    at = tile * k_steps + ke
    while at < end:  # the following tiles, each from its first K step
        tile = at // k_steps
        ke = tl.minimum(end - tile * k_steps, k_steps)
        rn = tile * BLOCK_N + rn0
        acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
        acc = _segment(acc, X, W, rn, rn < N, K, stride_wn, 0, ke, BLOCK_K)
        _hand_in(acc, Y, WS, LOCKS, tile, 0, ke, k_steps, total, N, BLOCK_N)
        at = tile * k_steps + ke


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
    if config.stream_k:
        return _stream_k_gemv(x, w, y, config)
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
        **launch_options(x.device, placed=config.block_m > 1),
    )
    return y


def _multiprocessors(device: torch.device) -> int:
    """SMs of a GPU; 1 elsewhere (Triton's interpreter), so tests choose the program count."""
    if device.type != "cuda":
        return 1
    return torch.cuda.get_device_properties(device).multi_processor_count


def _stream_k_gemv(x: torch.Tensor, w: torch.Tensor, y: torch.Tensor, config: TileConfig):
    n, k = w.shape
    if config.block_m != 1 or config.split_k != 1:
        raise ValueError("the stream-K schedule is the one-row GEMV's: block_m 1, split_k 1")
    tiles = triton.cdiv(n, config.block_n)
    steps = tiles * triton.cdiv(k, config.block_k)
    # at most one program a K step: a program with none would never hand in its share
    programs = min(steps, _multiprocessors(x.device) * config.stream_k)
    workspace = torch.empty(programs * 2 * config.block_n, dtype=torch.float32, device=x.device)
    _stream_k_gemv_kernel[(programs,)](
        x,
        w,
        y,
        workspace,
        _tile_counters(x.device, tiles),
        n,
        k,
        w.stride(0),
        BLOCK_N=config.block_n,
        BLOCK_K=config.block_k,
        num_warps=config.num_warps,
        num_stages=config.num_stages,
        **launch_options(x.device),
    )
    return y
