"""A hand-laid nsys export of a tensor-parallel run: one process per rank, one GPU each, bubblelab's
NVTX ranges in every process and NCCL kernels inside every forward, with a known straggler and a
known skew. For tests only, like synthetic_trace (no product layer imports it).

The layout, per step k (k = 0 a prefill, then decodes at 4 rows; depth 1), times in us relative to
T = 10000 + 1000 k. Rank 0 (pid 486, GPU 0) plans and commits; rank r >= 1 (pid 486 + r, GPU r)
follows the hand-off, as the engine's workers do:

  rank 0  host  plan [0,50) | launch [50,200) > handoff [60,80), copy_h2d [85,95), forward [100,190)
                | finalize [200,260) > handoff [205,215), sampling [220,240), copy_d2h [245,255)
                | commit [260,700) > wait [270,690)
          GPU   HtoD [100,105) | gemm_a [120,300) AllReduce [300,420) gemm_b [420,520)
                AllGather [520,560) | argmax [560,580) | DtoH [580,585)
  rank r  host  launch [150,230) > copy_h2d [155,165), forward [180,225)
                | finalize [230,280) > sampling [240,260)
          GPU   HtoD [170,175) | gemm_a [200,380) AllReduce [380,420) gemm_b [420,520)
                AllGather [520,560) | argmax [560,590)

Rank 1 starts its forward 80 us after rank 0 (the hand-off's lag), and rank 0's first all-reduce
waits for it (120 us of NCCL against rank 1's 40). Every rank's GPU ends the step's sampling at 590
but rank 0's at 580: the GPU straggler is rank 1, 10 us late, except at step STRAGGLER_FLIP, where
rank 0's argmax runs [560,600) (and its DtoH [600,605)) and rank 0 is last by 10 us. The host
straggler (the last to finish enqueueing the forward, `launch`'s end) is always rank 1, 30 us late.
"""

from __future__ import annotations

from pathlib import Path

from testing.synthetic_trace import COMPUTE, COPY, DTOH, HTOD, TraceBuilder

STEPS = 10
STRAGGLER_FLIP = 4  # the step whose GPU straggler is rank 0
ALL_REDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"  # NCCL >= 2.19's kernel names
ALL_GATHER = "ncclKernel_AllGather_RING_LL_Sum_int8_t"  # and older NCCL's


def rank_tid(rank: int) -> int:
    """The main thread's globalTid of rank `rank`'s process (pid 486 + rank)."""
    pid = (486 + rank) << 24 | 0x10000000000
    return pid | (486 + rank)


def tp_trace(path: Path, ranks: int = 2, steps: int = STEPS, ours: bool = True) -> Path:
    """Write the export described above for `ranks` processes (ranks >= 2 repeat rank 1).
    ours=False leaves out every NVTX range and mark: another engine's trace of the same work."""
    b = TraceBuilder(domain_tids=tuple(rank_tid(r) for r in range(ranks)), gpus=ranks)
    if not ours:
        b.range = b.mark = lambda *args, **kwargs: None  # type: ignore[method-assign,assignment]
    for k in range(steps):
        t = 10000 + 1000 * k
        kind, tokens = ("prefill", 64) if k == 0 else ("decode", 4)
        meta = f"kind={kind} bs=4 tokens={tokens} depth=1"
        late = 40 if k == STRAGGLER_FLIP else 20
        _rank0(b, k, t, kind, meta, late)
        for r in range(1, ranks):
            _worker(b, r, k, t, kind, meta)
    return b.write(path)


def _rank0(b: TraceBuilder, k: int, t: float, kind: str, meta: str, sampling_us: float) -> None:
    tid = rank_tid(0)
    b.range("plan", k, t, t + 50, tid=tid)
    b.range("launch", k, t + 50, t + 200, tid=tid)
    b.mark(k, meta, t + 50, tid=tid)
    b.range("handoff", k, t + 60, t + 80, tid=tid)
    b.range("copy_h2d", k, t + 85, t + 95, tid=tid)
    b.memcpy(t + 88, t + 100, t + 105, HTOD, stream=COMPUTE, tid=tid)
    b.range(kind if kind == "prefill" else "forward", k, t + 100, t + 190, tid=tid)
    b.kernel("gemm_a", t + 110, t + 120, t + 300, tid=tid)
    b.kernel(ALL_REDUCE, t + 120, t + 300, t + 420, tid=tid)
    b.kernel("gemm_b", t + 130, t + 420, t + 520, tid=tid)
    b.kernel(ALL_GATHER, t + 140, t + 520, t + 560, tid=tid)
    b.range("finalize", k, t + 200, t + 260, tid=tid)
    b.range("handoff", k, t + 205, t + 215, tid=tid)
    b.range("sampling", k, t + 220, t + 240, tid=tid)
    end = t + 560 + sampling_us
    b.kernel("argmax", t + 225, t + 560, end, tid=tid)
    b.range("copy_d2h", k, t + 245, t + 255, tid=tid)
    b.memcpy(t + 248, end, end + 5, DTOH, stream=COPY, tid=tid)
    b.range("commit", k, t + 260, t + 700, tid=tid)
    b.range("wait", k, t + 270, t + 690, tid=tid)
    b.sync("cudaEventSynchronize_v3020", t + 275, t + 685, sync_type=1, tid=tid)


def _worker(b: TraceBuilder, rank: int, k: int, t: float, kind: str, meta: str) -> None:
    tid = rank_tid(rank)
    b.range("launch", k, t + 150, t + 230, tid=tid)
    b.mark(k, meta, t + 150, tid=tid)
    b.range("copy_h2d", k, t + 155, t + 165, tid=tid)
    b.memcpy(t + 158, t + 170, t + 175, HTOD, stream=COMPUTE, tid=tid, device=rank)
    b.range(kind if kind == "prefill" else "forward", k, t + 180, t + 225, tid=tid)
    b.kernel("gemm_a", t + 190, t + 200, t + 380, tid=tid, device=rank)
    b.kernel(ALL_REDUCE, t + 200, t + 380, t + 420, tid=tid, device=rank)
    b.kernel("gemm_b", t + 210, t + 420, t + 520, tid=tid, device=rank)
    b.kernel(ALL_GATHER, t + 220, t + 520, t + 560, tid=tid, device=rank)
    b.range("finalize", k, t + 230, t + 280, tid=tid)
    b.range("sampling", k, t + 240, t + 260, tid=tid)
    b.kernel("argmax", t + 245, t + 560, t + 590, tid=tid, device=rank)
