"""Run a workload through the engine and summarise it: the core of `bubblelab run` and of
run-and-profile."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from ..core.contract import RUN_DOMAIN
from ..core.sequence import Sequence
from ..core.steady import steady_state
from ..core.timeline import Timeline
from ..engine.llm_engine import LLMEngine
from .latency import latency_summary, request_latency
from .region import TimedRegion, flags, step_profile
from .warmup import probe, warm_up
from .workload import Request, WorkloadSpec, make_requests


@dataclass
class RunResult:
    summary: dict
    outputs: dict[str, list[int]]
    finish_reasons: dict[str, str | None]
    timeline: Timeline
    requests: list[Request] = field(default_factory=list)
    # run_workload(latency=True): TTFT/TPOT/ITL/E2E stats and each request's own (engine.latency).
    latency: dict = field(default_factory=dict)
    request_latency: dict[str, dict] = field(default_factory=dict)
    # Tensor parallel: the timelines of ranks 1..N-1 over the same run (rank 0's is `timeline`).
    rank_timelines: list[Timeline] = field(default_factory=list)


def drive(
    engine: LLMEngine,
    requests: list[Request],
    streams: int,
    progress: Callable[[int], None] | None = None,
    finished: dict[str, Sequence] | None = None,
) -> tuple[dict[str, list[int]], dict[str, str | None]]:
    """Closed loop with `streams` requests in flight (or timed arrivals) until every request has
    finished. Returns each request's tokens and finish reason; `finished` collects the Sequences."""
    pending = list(requests)
    outputs: dict[str, list[int]] = {}
    reasons: dict[str, str | None] = {}
    active = 0
    start = time.perf_counter()
    while pending or engine.has_unfinished():
        now = time.perf_counter() - start
        while pending and active < streams and pending[0].arrival_s <= now:
            r = pending.pop(0)
            engine.add_request(r.request_id, r.prompt_ids, r.params)
            active += 1
        if not engine.has_unfinished():
            # Idle until the next arrival.
            time.sleep(max(0.0, min(0.001, pending[0].arrival_s - now)))
            continue
        for out in engine.step():
            if out.finished:
                outputs[out.request_id] = out.token_ids
                reasons[out.request_id] = out.finish_reason
                seq = engine.seqs.pop(out.request_id, out.seq)
                if finished is not None:
                    finished[out.request_id] = seq
                active -= 1
                if progress is not None:
                    progress(1)
    return outputs, reasons


def run_workload(
    engine: LLMEngine,
    spec: WorkloadSpec,
    *,
    warmup: bool = True,
    profile: bool = False,
    progress: Callable[[int], None] | None = None,
    latency: bool = False,
    mark: str | None = None,
) -> RunResult:
    """Warm up (runs.warmup: every shape the run can reach), then run `spec` with the in-process
    timeline on (and the CUDA profiler range when profiling) inside a quiet, watched region
    (runs.region: no garbage collection; compiles, captures, new shapes and allocator growth
    counted). latency: also time each token's commit, for TTFT / TPOT / ITL (RunResult.latency).
    mark: profile inside a capture range the caller holds open over several runs (runs.worker),
    marking this run's timed region with an NVTX range of that name (core.contract.RUN_DOMAIN)
    instead of opening and closing a range of its own."""
    spec.check_fits(engine.config.max_model_len)
    requests = make_requests(spec, engine.loaded.config.vocab_size)
    timeline = engine.timeline if engine.timeline is not None else Timeline()
    engine.timeline = engine.phases.timeline = timeline
    warm_t0 = time.perf_counter()
    warmed: dict = {}
    if warmup:
        timeline.enabled = False
        warmed = warm_up(engine, spec, requests) | probe(engine, spec, requests)
    timeline.clear()
    timeline.enabled = True
    timeline.depth = engine.config.depth
    engine.streams.synchronize()
    engine.streams.calibrate()  # a fresh device-clock reference for this run's timeline
    engine.record_token_times = latency
    finished: dict[str, Sequence] = {}
    region = TimedRegion(engine)
    try:
        with region:  # its entry collects the garbage: part of the warm-up
            t_open = time.perf_counter()
            warmup_s = t_open - warm_t0
            if engine.workers is not None:  # every rank: a fresh timeline, and the profiler range
                engine.workers.begin_run(profile, engine.config.depth)
            own_range = profile and mark is None and engine.streams.is_cuda
            if own_range:
                torch.cuda.profiler.start()
            marked = run_mark(mark)
            t0 = time.perf_counter()
            with (
                marked,
                GpuClocks(engine.streams.device if engine.streams.is_cuda else None) as clocks,
            ):
                outputs, reasons = drive(engine, requests, spec.streams, progress, finished)
                engine.streams.synchronize()
            wall = time.perf_counter() - t0
            if own_range:
                torch.cuda.profiler.stop()
            ranks = engine.workers.end_run() if engine.workers is not None else []
            t_closed = time.perf_counter()
    finally:
        engine.record_token_times = False
    # Opening and closing the capture range (and the ranks' begin_run): nsys's time, not the run's.
    opened, closed = t0 - t_open, t_closed - t0 - wall
    summary = {**summarize(engine, spec, timeline, outputs, wall), **clocks.summary(),
               "warmup_s": warmup_s, "profiler_s": opened + closed,
               "profiler_start_s": opened, "profiler_stop_s": closed,
               **warmed, **region.summary(), **step_profile(timeline, wall)}  # fmt: skip
    summary["timing_flags"] = flags(summary)
    result = RunResult(summary, outputs, reasons, timeline, requests, rank_timelines=ranks)
    if latency:
        result.latency = latency_summary(finished.values())
        result.request_latency = {rid: request_latency(seq) for rid, seq in finished.items()}
    return result


def run_mark(name: str | None):
    """An NVTX range named `name` in core.contract.RUN_DOMAIN (None: nothing): where a run's timed
    region lies in a capture of several runs (profiling.trim.split_runs cuts it there)."""
    if name is None:
        return contextlib.nullcontext()
    import nvtx  # only when profiling, as engine.phases

    return nvtx.annotate(message=name, domain=RUN_DOMAIN)


class GpuClocks:
    """SM clock and power, sampled every `period_s` on a thread while a run lasts (CUDA only): a GPU
    that idles between steps may boost higher, so depth 1 and depth 2 forwards can differ for that
    alone."""

    def __init__(self, device: torch.device | None, period_s: float = 0.05):
        self.device, self.period_s = device, period_s
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()

    def __enter__(self) -> GpuClocks:
        if self.device is not None:
            try:
                torch.cuda.clock_rate(self.device)  # needs pynvml; none: no samples
            except Exception:  # noqa: BLE001 - ModuleNotFoundError, NVML errors
                self.device = None
            else:
                self._thread = threading.Thread(target=self._run, daemon=True)
                self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            mhz = torch.cuda.clock_rate(self.device)
            self.samples.append((mhz, torch.cuda.power_draw(self.device) / 1e3))

    def __exit__(self, *exc) -> None:
        if self.device is not None:
            self._stop.set()
            self._thread.join()

    def summary(self) -> dict:
        if not self.samples:
            return {}
        mhz, watts = np.array(self.samples).T
        return {"sm_clock_mhz_median": float(np.median(mhz)), "sm_clock_mhz_min": float(mhz.min()),
                "power_w_median": float(np.median(watts))}  # fmt: skip


def summarize(
    engine: LLMEngine,
    spec: WorkloadSpec,
    timeline: Timeline,
    outputs: dict[str, list[int]],
    wall: float,
) -> dict:
    """Throughput, step period (median and spread), prefill vs decode time, measured L."""
    gen = sum(len(v) for v in outputs.values())
    dev = timeline.device_frame()
    steps = timeline.steps_frame()
    fwd = dev[dev.phase == "forward"].merge(steps, on="step").sort_values("start_ns")
    starts = fwd.start_ns.to_numpy()
    periods = np.diff(starts) / 1e6
    kinds = fwd.kind.to_numpy()[:-1]
    decode_periods = periods[kinds == "decode"] if len(periods) else periods
    q = np.percentile(decode_periods, [10, 50, 90]) if len(decode_periods) else [float("nan")] * 3
    # The steady steps' median (core.steady), as the prediction table's step CVs read each run.
    steady = steady_state(
        pd.DataFrame({"run_id": "run", "step": fwd.step, "kind": fwd.kind,
                      "batch_size": fwd.batch_size, "period_ms": np.append(periods, np.nan)})
    )["period_ms"]  # fmt: skip
    c = engine.config
    return {
        "model": engine.loaded.name,
        "source": engine.loaded.source,
        "device": _device_name(engine),
        "dtype": c.dtype,
        "depth": c.depth,
        "tensor_parallel": c.tensor_parallel,
        "streams": spec.streams,
        "requests": spec.requests,
        "output_len_mean": spec.output_len_mean,
        "prompt_len": spec.prompt_len,
        "constraint": spec.constraint,
        "constrained_share": spec.constrained_share,
        "arrival_rate": spec.arrival_rate,
        "cuda_graphs": engine.runner.graphs.captured,
        "compiled": engine.loaded.model.compile_enabled,
        "attention_backend": engine.loaded.model.attn_backend.name,
        "generated_tokens": int(gen),
        "mean_generated_len": gen / max(1, len(outputs)),
        "wall_s": wall,
        "tokens_per_s": gen / wall if wall > 0 else float("nan"),
        "decode_steps": int((kinds == "decode").sum()),
        "prefill_steps": int((fwd.kind == "prefill").sum()),
        "step_ms_p10": float(q[0]),
        "step_ms_median": float(q[1]),
        "step_ms_p90": float(q[2]),
        "steady_step_ms_median": float(steady.median()) if len(steady) else float("nan"),
        "prefill_s": float(periods[kinds == "prefill"].sum() / 1e3) if len(periods) else 0.0,
        "decode_s": float(decode_periods.sum() / 1e3) if len(decode_periods) else 0.0,
        "preemptions": engine.scheduler.num_preemptions,
        **_clock_anchors(engine),
    }


def _clock_anchors(engine: LLMEngine) -> dict:
    """How far the device clock had drifted at each re-anchoring (CudaClock.anchor), in us."""
    shifts = np.abs(engine.streams.clock.anchored_us) if engine.streams.is_cuda else np.array([])
    if not len(shifts):
        return {}
    return {"clock_anchors": len(shifts), "clock_anchor_us_median": float(np.median(shifts)),
            "clock_anchor_us_max": float(shifts.max())}  # fmt: skip


def _device_name(engine: LLMEngine) -> str:
    if engine.streams.is_cuda:
        return torch.cuda.get_device_name(engine.streams.device)
    return "cpu"
