"""Synthetic nsys exports of engines that are not bubblelab, with every mess of a real trace, and
the truth about their steps (tests/test_profiling_foreign.py checks the analysis against it and
against brute force; benchmarks.analyze_1m_kernels scales one up). For tests and benchmarks only,
like synthetic_trace.

A blocking engine loop, simulated on a clock: per step it uploads its inputs (pinned HtoD copies, a
DtoD copy and a memset into the graph's buffers), runs the forward (one CUDA-graph replay traced
node by node on the graph's own stream, or, for the prefill and eager engines, kernel by kernel),
the LM head (driver API cuLaunchKernel), optionally N `.item()`-style syncs (a 4-byte pageable DtoH
copy + cudaStreamSynchronize each, nothing launched in between: PyPI nano-vllm-fork does 128 a
step), a clone kernel, sampling (cuLaunchKernelEx) beside a kernel on a second stream, then reads
the tokens back (a pageable DtoH copy + cudaStreamSynchronize; or a synchronous cudaMemcpy with no
sync record; or a pinned copy + an event sync) and does its bookkeeping (OS runtime calls and
untraced host code) before the next step. Framework NVTX ranges (the default domain) wrap the calls;
optionally one range per step in a domain of its own. Shaped like transformers' `generate`
(optional): a preamble of host checks before the first step (a tiny kernel, then a 1-byte DtoH read
+ cudaStreamSynchronize each), and an 8-byte pageable upload + stream sync in each layer of the
prefill (its static cache's lazy initialisation), syncs that read nothing back.

Shapes that mislead a rule (issue #24): a decode forward of several graph replays (XLA's command
buffers, per-layer or piecewise graphs: `graphs_per_step`); reads of the logits mid-step, each
followed by as much host work as the step's bookkeeping, then the sampling (`mid_reads`: several
reading syncs a step, alike); and a wait
outside the CUDA API (`wait="futex"`, as JAX waits: a helper thread of the process enqueues the
tokens' copy back, the engine thread enqueues a host callback and sleeps in `futex` until it
fires; no blocking CUDA call on the engine thread; `wait="callback"`: the same without the copy,
the tokens staying on the GPU).

Times are microseconds; the GPU runs each op when it is launched and the GPU has finished the ops
before it (plus a 2 us launch latency), so every sync ends when the GPU is done.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from testing.synthetic_trace import (
    COMPUTE,
    DTOH,
    HTOD,
    MAIN,
    PAGEABLE,
    PINNED,
    TraceBuilder,
    us,
)

SIDE = 22  # a second compute stream
GRAPH = 31  # the stream a graph's nodes run on
DTOD = 8
READER = MAIN + 1  # a helper thread of the engine's process (wait="futex": it reads the tokens)


@dataclass
class Engine:
    steps: int = 12
    extra_syncs: int = 0  # .item()-style syncs a step, before sampling
    graph: bool = True  # decode forward as one graph replay (else eager kernels)
    driver_api: bool = (
        False  # every call through the driver API (cuLaunchKernel, cuMemcpy*, cuGraphLaunch)
    )
    close: str = "tolist"  # tolist | memcpy (synchronous cudaMemcpy, no sync record) | event
    framework_ranges: bool = True  # default-domain ranges around the calls (not steps)
    step_range: str | None = None  # one range of this name around each step (domain 2)
    osrt: bool = True
    prefill_first: bool = True
    preamble_reads: int = 0  # host checks before the first step, each a step of its own
    upload_syncs: int = 0  # pageable uploads + a stream sync, spread over the prefill's kernels
    nodes: int = 30  # graph nodes (kernels) of a decode forward
    node_us: float = 20.0
    node_gap_us: float = 1.0  # launch gap between nodes: below the 5 us kernel-gap threshold
    bookkeeping_us: float = 900.0
    graphs_per_step: int = 1  # the decode forward as this many replays of distinct graphs
    graph_trace: str = "node"  # how nsys traced the replays: node (kernels) or graph (one row each)
    mid_reads: int = 0  # reads of the logits a step, host work, then the sampling launched
    wait: str = "cuda"  # cuda: closed as `close` says; futex | callback: outside the CUDA API
    tid: int = MAIN
    device: int = 0
    t0: float = 1000.0


@dataclass
class Truth:
    """What the trace is: each step's host window (ns; a sync-rule step runs from the previous
    step's closing sync to the end of its own), the step range's windows (ns), graph launch times
    (ns)."""

    windows: list[tuple[int, int]] = field(default_factory=list)
    range_windows: list[tuple[int, int]] = field(default_factory=list)
    graph_launches: list[int] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    # what belongs to each step whatever the rule: from its first launch to the next step's (ns)
    launch_windows: list[tuple[int, int]] = field(default_factory=list)


class _Loop:
    """The engine's host thread and the GPU's queue, on one clock."""

    def __init__(self, b: TraceBuilder, e: Engine) -> None:
        self.b, self.e, self.t, self.gpu_free = b, e, e.t0, 0.0

    def api(self, runtime: str, driver: str) -> str:
        return driver if self.e.driver_api else runtime

    def frame(self, name: str, length: float) -> tuple[float, float]:
        """A framework range (default domain) of `length` us starting now."""
        start = self.t
        if self.e.framework_ranges:
            self.b.range(name, None, start, start + length, self.e.tid, domain_id=0)
        return start, start + length

    def run_at(self, launched: float, dur: float) -> tuple[float, float]:
        start = max(launched + 2, self.gpu_free)
        self.gpu_free = start + dur
        return start, self.gpu_free

    def kernel(self, name: str, dur: float, api: str, stream: int = COMPUTE) -> None:
        at = self.t
        self.frame(f"aten::{name}", 4)
        self.b.kernel(
            name,
            at + 1,
            *self.run_at(at + 1, dur),
            stream,
            api=api,
            tid=self.e.tid,
            device=self.e.device,
        )
        self.t += 5

    def copy(self, kind: int, dur: float, host_kind: int, nbytes: int, blocking: bool) -> None:
        at = self.t
        api = self.api(
            "cudaMemcpyAsync_v3020",
            "cuMemcpyDtoHAsync_v2"
            if kind == DTOH
            else "cuMemcpyHtoDAsync_v2"
            if kind == HTOD
            else "cuMemcpyDtoDAsync_v2",
        )
        start, end = self.run_at(at + 1, dur)
        host = (end - at + 2) if blocking else 3
        self.frame("aten::copy_", host + 1)
        self.b.memcpy(
            at + 1,
            start,
            end,
            kind,
            host_kind,
            COMPUTE,
            api,
            nbytes,
            self.e.tid,
            self.e.device,
            host_us=host,
        )
        self.t += host + 2

    def synchronize(
        self, record: int | None = 3, name: str = "cudaStreamSynchronize_v3020"
    ) -> None:
        at = self.t
        end = max(at + 2, self.gpu_free + 3)
        self.b.sync(self.api(name, "cuStreamSynchronize"), at, end, record, self.e.tid)
        self.t = end + 1


def engine_trace(b: TraceBuilder, e: Engine) -> Truth:
    """Write one engine's loop into builder `b`; returns the truth about its steps."""
    b.graph_trace = e.graph_trace
    loop, truth = _Loop(b, e), Truth()
    launch_kernel = loop.api("cudaLaunchKernel_v7000", "cuLaunchKernel")
    previous_close = None
    for _ in range(e.preamble_reads):  # e.g. `generate` checking its pad/eos tensors on the host
        loop.kernel("eq_check", 2, launch_kernel)
        loop.copy(DTOH, 1, PINNED, 1, blocking=False)
        loop.synchronize()
        close_end = us(loop.t - 1)
        truth.windows.append(
            (us(b_first_launch(b, e)) if previous_close is None else previous_close, close_end)
        )
        truth.kinds.append("decode")  # too little GPU work to be prefill-like; never steady
        previous_close = close_end
        loop.t += 20
    for k in range(e.steps):
        prefill = e.prefill_first and k == 0
        truth.kinds.append("prefill" if prefill else "decode")
        step_start = loop.t
        truth.launch_windows.append((us(step_start + 1), 0))  # the first upload's call
        # inputs: three pinned uploads, a DtoD copy and a memset into the graph's buffers
        for _ in range(3):
            loop.copy(HTOD, 1, PINNED, 512, blocking=False)
        loop.copy(DTOD, 1, PINNED, 1024, blocking=False)
        at = loop.t
        b.memset(
            at + 1,
            *loop.run_at(at + 1, 1),
            COMPUTE,
            loop.api("cudaMemsetAsync_v3020", "cuMemsetD8Async"),
            e.tid,
            e.device,
        )
        loop.t += 4
        # forward
        if prefill or not e.graph:
            kernels = e.nodes * (3 if prefill else 1)
            uploads = {
                j * kernels // e.upload_syncs for j in range(e.upload_syncs if prefill else 0)
            }
            for i in range(kernels):
                loop.kernel(
                    f"eager_{i % 5}", 3 * e.node_us if prefill else e.node_us, launch_kernel
                )
                if i in uploads:  # after this layer's first kernel
                    loop.copy(HTOD, 1, PAGEABLE, 8, blocking=False)
                    loop.synchronize()
        else:
            for g in range(e.graphs_per_step):  # each a graph of its own (node ids say which)
                at, host = loop.t, 30.0
                start = max(at + 2, loop.gpu_free)
                nodes = [
                    (
                        start + i * (e.node_us + e.node_gap_us),
                        start + i * (e.node_us + e.node_gap_us) + e.node_us,
                    )
                    for i in range(e.nodes // e.graphs_per_step)
                ]
                loop.frame("graph.replay", host + 1)
                b.graph_launch(
                    at,
                    nodes,
                    loop.api("cudaGraphLaunch_v10000", "cuGraphLaunch"),
                    e.tid,
                    GRAPH,
                    e.device,
                    host,
                    graph_id=g + 1,
                )
                truth.graph_launches.append(us(at))
                loop.gpu_free = nodes[-1][1]
                loop.t += host + 2
        loop.kernel("lm_head_gemm", 40, "cuLaunchKernel")
        for _ in range(e.extra_syncs):  # .item(): a 4-byte pageable copy back, then a stream sync
            loop.copy(DTOH, 1, PAGEABLE, 4, blocking=False)
            loop.synchronize()
            loop.t += 8  # the loop's Python between two .item() calls
        for _ in range(e.mid_reads):  # the logits checked on the host before sampling: a read,
            loop.kernel("isfinite_all", 4, launch_kernel)  # then as much host work as the
            loop.copy(DTOH, 1, PAGEABLE, 1, blocking=False)  # step's bookkeeping: no sync rule
            loop.synchronize()  # can tell this point from the closing one
            loop.t += e.bookkeeping_us
        loop.kernel("clone", 3, launch_kernel)
        loop.kernel("side_stream_softmax", 5, launch_kernel, SIDE)
        loop.kernel("sampler_argmax", 6, "cuLaunchKernelEx")
        # read the tokens back: the sync that closes the step
        if e.wait in ("futex", "callback"):
            at = loop.t
            start, end = loop.run_at(at + 5, 1)
            if e.wait == "futex":
                b.memcpy(at + 5, start, end, DTOH, PINNED, COMPUTE, "cuMemcpyDtoHAsync_v2", 128,
                         READER, e.device, host_us=3)  # fmt: skip
            b.call("cuLaunchHostFunc", at, at + 2, e.tid)  # launches no GPU op
            b.os_call("futex", at + 3, end + 20, e.tid)  # woken by the callback
            loop.t = end + 21
        elif e.close == "tolist":
            loop.copy(DTOH, 1, PAGEABLE, 8 * 16, blocking=False)
            loop.synchronize()
        elif e.close == "memcpy":  # synchronous copy, no sync call and no sync record
            at = loop.t
            start, end = loop.run_at(at + 1, 1)
            b.memcpy(
                at + 1,
                start,
                end,
                DTOH,
                PAGEABLE,
                COMPUTE,
                loop.api("cudaMemcpy_v3020", "cuMemcpyDtoH_v2"),
                128,
                e.tid,
                e.device,
                host_us=end - at + 2,
            )
            loop.t = end + 4
        else:  # event: a pinned async copy and an event sync
            loop.copy(DTOH, 1, PINNED, 128, blocking=False)
            loop.synchronize(record=1, name="cudaEventSynchronize_v3020")
        close_end = us(loop.t - 1)
        truth.windows.append(
            (us(b_first_launch(b, e)) if previous_close is None else previous_close, close_end)
        )
        previous_close = close_end
        # bookkeeping: OS calls and untraced host code
        if e.osrt:
            b.os_call("pthread_mutex_lock", loop.t + 10, loop.t + 12, e.tid)
            b.os_call("poll", loop.t + 100, loop.t + 160, e.tid)
            b.os_call("read", loop.t + 120, loop.t + 130, e.tid, nesting=1)
        loop.t += e.bookkeeping_us
        if e.step_range:
            b.range(e.step_range, None, step_start, loop.t - 1, e.tid, domain_id=2)
            truth.range_windows.append((us(step_start), us(loop.t - 1)))
    truth.launch_windows = [
        (s, truth.launch_windows[i + 1][0] if i + 1 < e.steps else us(loop.t))
        for i, (s, _) in enumerate(truth.launch_windows)
    ]
    # the step range rule: each window runs to the next step's range
    truth.range_windows = [
        (s, truth.range_windows[i + 1][0] if i + 1 < len(truth.range_windows) else end)
        for i, (s, end) in enumerate(truth.range_windows)
    ]
    return truth


def b_first_launch(b: TraceBuilder, e: Engine) -> float:
    """Host time (us) of the engine thread's first launching call (the first step's window opens
    there)."""
    launching = {
        row["correlationId"]
        for table in (
            "CUPTI_ACTIVITY_KIND_KERNEL",
            "CUPTI_ACTIVITY_KIND_MEMCPY",
            "CUPTI_ACTIVITY_KIND_MEMSET",
        )
        for row in b.rows[table]
    }
    return (
        min(
            row["start"]
            for row in b.rows["CUPTI_ACTIVITY_KIND_RUNTIME"]
            if row["correlationId"] in launching and row["globalTid"] == e.tid
        )
        / 1000
    )
