"""The seeds benchmarks.analyze_1m_kernels scales up to a million kernels: a trace of our engine
(depth 2, bubblelab's NVTX ranges) and traces of another engine (testing.synthetic_engines), all
with the real probe's tables and columns (testing.synthetic_trace)."""

from __future__ import annotations

from pathlib import Path

from testing.synthetic_engines import Engine, engine_trace
from testing.synthetic_trace import COPY, DTOH, HTOD, TraceBuilder


def engine_shaped_seed(path: Path, steps: int = 8, kernels_per_forward: int = 400) -> Path:
    """A depth-2 run: per step plan, launch > copy_h2d, forward (400 kernels), commit > wait,
    finalize."""
    b = TraceBuilder()
    tick = 4.0 * kernels_per_forward + 100  # us: 4 us kernels, the GPU always a bit behind
    for k in range(steps + 1):
        t = 1000 + tick * k
        if k < steps:
            b.range("plan", k, t, t + 20)
            b.range("launch", k, t + 20, t + 20 + 3 * kernels_per_forward + 30)
            b.mark(k, "kind=decode bs=8 tokens=8 depth=2", t + 20)
            b.range("copy_h2d", k, t + 22, t + 28)
            b.memcpy(t + 24, t + 60, t + 62, HTOD)
            b.range("forward", k, t + 30, t + 30 + 3 * kernels_per_forward + 10)
            for i in range(kernels_per_forward):
                b.kernel(
                    f"layer_kernel_{i % 12}", t + 32 + 3 * i, t + 62 + 4 * i, t + 62 + 4 * i + 3.6
                )
        if k > 0:
            base = t + 3 * kernels_per_forward + 60
            b.range("commit", k - 1, base, base + 30)
            b.range("wait", k - 1, base + 2, base + 10)
            b.sync("cudaEventSynchronize_v3020", base + 3, base + 9, sync_type=1)
        if k < steps:
            base = t + 3 * kernels_per_forward + 95
            b.range("finalize", k, base, base + 4)
            b.range("sampling", k, base, base + 2)
            b.kernel(
                "argmax",
                base + 1,
                t + 62 + 4 * kernels_per_forward,
                t + 64 + 4 * kernels_per_forward,
            )
            b.range("copy_d2h", k, base + 2, base + 4)
            b.memcpy(
                base + 3,
                t + 64 + 4 * kernels_per_forward,
                t + 65 + 4 * kernels_per_forward,
                DTOH,
                stream=COPY,
            )
    return b.write(path)


def foreign_seed(path: Path, eager: bool) -> Path:
    """Another engine's trace: a prefill, then decode steps of 400 kernels (one node-traced graph
    replay, or 400 eager launches each in a framework NVTX range), driver-API launches, two streams,
    copies, memsets, OS calls, 2 `.item()` syncs and a `.tolist()` a step, one NVTX range per
    step."""
    b = TraceBuilder()
    engine = Engine(
        steps=8,
        nodes=400,
        graph=not eager,
        extra_syncs=2,
        step_range="LLMEngine.step",
        node_us=4.0,
        bookkeeping_us=300.0,
    )
    engine_trace(b, engine)
    return b.write(path, our_domain=False)
