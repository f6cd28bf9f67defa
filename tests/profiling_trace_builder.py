"""Two hand-laid traces whose every profiling number is computed by hand in the tests (written with
testing.synthetic_trace.TraceBuilder)."""

from __future__ import annotations

from pathlib import Path

from testing.synthetic_trace import (
    COMPUTE,
    COPY,
    DTOH,
    HTOD,
    PAGEABLE,
    TraceBuilder,
)


def blocking_trace(path: Path) -> Path:
    """Depth 1: six steps 1 ms apart (step 0 a prefill, step 5 a ramp-down at bs=3).

    Per step k, times relative to T = 10000 + 1000 k (us):
      host  plan [0,100) | launch [100,300) > copy_h2d [110,130), forward [150,290)
            finalize [300,400) > sampling [310,340), copy_d2h [350,370) | commit [400,900) > wait
            [410,770)
            | cudaEventQuery at 950, outside any phase (polls never block)
      GPU   HtoD [140,150) | A [200,500) B [510,700) (a 10 us launch gap) | S [700,750)
            | DtoH pinned [750,760) on the copy stream, after a cudaStreamWaitEvent in copy_d2h
    Extras: step 2 has a `mask` [301,309) in finalize holding a cudaStreamSynchronize (the bug the
    post found); step 1 does a pageable DtoH copy in commit at 800, on the GPU [800,805); after the
    loop, at 16500, a cudaDeviceSynchronize outside every range (teardown: listed, not flagged).
    """
    b = TraceBuilder()
    for k in range(6):
        t = 10000 + 1000 * k
        kind, bs = ("prefill", 4) if k == 0 else ("decode", 3 if k == 5 else 4)
        b.range("plan", k, t, t + 100)
        b.range("launch", k, t + 100, t + 300)
        b.mark(k, f"kind={kind} bs={bs} tokens={64 if kind == 'prefill' else bs} depth=1", t + 100)
        b.range("copy_h2d", k, t + 110, t + 130)
        b.memcpy(t + 115, t + 140, t + 150, HTOD, stream=COMPUTE)
        b.range(kind if kind == "prefill" else "forward", k, t + 150, t + 290)
        b.kernel("gemm_a", t + 160, t + 200, t + 500)
        b.kernel("gemm_b", t + 200, t + 510, t + 700)
        b.range("finalize", k, t + 300, t + 400)
        if k == 2:
            b.range("mask", k, t + 301, t + 309)
            b.sync("cudaStreamSynchronize_v3020", t + 302, t + 308, sync_type=3)
        b.range("sampling", k, t + 310, t + 340)
        b.kernel("argmax", t + 320, t + 700, t + 750)
        b.range("copy_d2h", k, t + 350, t + 370)
        b.sync("cudaStreamWaitEvent_v3020", t + 351, t + 353, sync_type=2)
        b.memcpy(t + 355, t + 750, t + 760, DTOH)
        b.range("commit", k, t + 400, t + 900)
        b.range("wait", k, t + 410, t + 770)
        b.sync("cudaEventSynchronize_v3020", t + 420, t + 765, sync_type=1)
        if k == 1:
            b.memcpy(t + 800, t + 800, t + 805, DTOH, host_kind=PAGEABLE, stream=COMPUTE)
        b.sync("cudaEventQuery_v3020", t + 950, t + 952, sync_type=1)
    b.sync("cudaDeviceSynchronize_v3020", 16500, 16600, sync_type=4)
    return b.write(path)


def pipelined_trace(path: Path) -> Path:
    """Depth 2: five decode steps at bs=2, one tick every 400 us; tick k launches and finalizes step
    k and commits step k-1 (tick 5 only commits step 4).

    Per tick k, times relative to T = 20000 + 400 k (us):
      host  plan [0,50) | launch [50,150) > copy_h2d [55,65), forward [70,140)
            commit(k-1) [150,300) > wait [155,200) | finalize [300,380) > sampling [310,330),
            copy_d2h [340,360)
      GPU   HtoD [100,110) | memset [108,110) on the copy stream | A [110,310) B [310,460) | S
            [460,480)
            | DtoH [480,490) on the copy stream
    """
    b = TraceBuilder()
    for k in range(6):
        t = 20000 + 400 * k
        if k < 5:
            b.range("plan", k, t, t + 50)
            b.range("launch", k, t + 50, t + 150)
            b.mark(k, "kind=decode bs=2 tokens=2 depth=2", t + 50)
            b.range("copy_h2d", k, t + 55, t + 65)
            b.memcpy(t + 58, t + 100, t + 110, HTOD, stream=COMPUTE)
            b.range("forward", k, t + 70, t + 140)
            b.memset(t + 75, t + 108, t + 110, stream=COPY)
            b.kernel("gemm_a", t + 80, t + 110, t + 310)
            b.kernel("gemm_b", t + 100, t + 310, t + 460)
        if k > 0:
            b.range("commit", k - 1, t + 150, t + 300)
            b.range("wait", k - 1, t + 155, t + 200)
            b.sync("cudaEventSynchronize_v3020", t + 160, t + 195, sync_type=1)
        if k < 5:
            b.range("finalize", k, t + 300, t + 380)
            b.range("sampling", k, t + 310, t + 330)
            b.kernel("argmax", t + 315, t + 460, t + 480)
            b.range("copy_d2h", k, t + 340, t + 360)
            b.memcpy(t + 345, t + 480, t + 490, DTOH)
    return b.write(path)
