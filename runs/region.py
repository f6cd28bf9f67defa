"""The timed region of a run, kept quiet and watched: what could make one repeat slower than
another.

`TimedRegion` wraps a run's workload. On entry it collects Python's garbage, freezes what survives
(gc.freeze: the model, the engine and the requests are never scanned again, so the next run's
collection is quick) and disables the collector, so no collection pauses a step; on exit it turns
the collector back on. Meanwhile it
counts what should not happen once the engine is warm (issue #25: a slow repeat is a bug until shown
otherwise):

- torch.compile frames compiled (Dynamo's counters) and CUDA graphs captured (CudaGraphs.captures);
- forward and sampling shapes run for the first time (ModelRunner.shapes): a first run may allocate,
  autotune or JIT-compile a kernel;
- garbage collections and their pause (gc.callbacks): any that run despite the collector being off
  were asked for by someone (gc.collect);
- caching-allocator growth (memory reserved) and its retries (a retry frees cached blocks and
  synchronizes: milliseconds).

`step_profile` reads the run's own timeline: the slowest steps against the median step of their
kind, and the share of the wall the device sat idle while the host worked (the host share).
`flags` turns both into the short reasons a run's timing is suspect.
"""

from __future__ import annotations

import atexit
import functools
import gc
import time
from typing import Any

import numpy as np
import torch

from ..core.timeline import Timeline
from ..core.words import counted
from ..engine.llm_engine import LLMEngine

SLOWEST_STEPS = 3
SLOW_STEP_X = 3.0  # a decode step this many times the median decode step is a hiccup


def dynamo_frames() -> int:
    """Frames torch.compile has compiled in this process (a recompile counts as one more)."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:  # a torch without Dynamo compiles nothing
        return 0
    return int(counters["frames"]["total"])


class TimedRegion:
    """Collector off and counters read around a run's workload; `summary()` after the exit."""

    def __init__(self, engine: LLMEngine, gc_off: bool = True):
        self.engine, self.gc_off = engine, gc_off
        self.cuda = engine.streams.is_cuda
        self.gc_runs = 0
        self.gc_pause_ns = 0
        self._gc_started = 0
        self.before: dict[str, Any] = {}
        self.after: dict[str, Any] = {}
        self.collect_ms = 0.0

    def _counters(self) -> dict[str, Any]:
        runner = self.engine.runner
        out: dict[str, Any] = {
            "frames": dynamo_frames(),
            "captures": runner.graphs.captures,
            "shapes": set(runner.shapes),
        }
        if self.cuda:
            stats = torch.cuda.memory_stats(self.engine.streams.device)
            out |= {
                "reserved": stats.get("reserved_bytes.all.current", 0),
                "retries": stats.get("num_alloc_retries", 0),
                "device_allocs": stats.get("num_device_alloc", 0),
            }
        return out

    def _on_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter_ns()
        else:
            self.gc_runs += 1
            self.gc_pause_ns += time.perf_counter_ns() - self._gc_started

    def __enter__(self) -> TimedRegion:
        if self.gc_off:
            t0 = time.perf_counter()
            gc.collect()
            gc.freeze()
            gc.disable()
            _unfreeze_at_exit()
            self.collect_ms = (time.perf_counter() - t0) * 1e3
        self.before = self._counters()
        gc.callbacks.append(self._on_gc)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._on_gc)
        self.after = self._counters()
        if self.gc_off:
            gc.enable()  # what was frozen stays frozen: long-lived, and freed by reference count

    def summary(self) -> dict[str, Any]:
        """What happened inside the region (the *_in_run keys), JSON-ready."""
        b, a = self.before, self.after
        new_shapes = sorted(map(str, a["shapes"] - b["shapes"]))
        out: dict[str, Any] = {
            "compiles_in_run": a["frames"] - b["frames"],
            "captures_in_run": a["captures"] - b["captures"],
            "new_shapes_in_run": len(new_shapes),
            "new_shapes": new_shapes[:20],
            "gc_in_run": self.gc_runs,
            "gc_pause_ms_in_run": self.gc_pause_ns / 1e6,
            "gc_collect_ms_before": self.collect_ms,
            "gc_disabled_in_run": self.gc_off,
        }
        if self.cuda:
            out |= {
                "reserved_growth_mb_in_run": (a["reserved"] - b["reserved"]) / 2**20,
                "alloc_retries_in_run": a["retries"] - b["retries"],
                "device_allocs_in_run": a["device_allocs"] - b["device_allocs"],
            }
        return out


def step_profile(timeline: Timeline, wall_s: float) -> dict[str, Any]:
    """The slowest steps (by period: forward start to the next forward start) against the median
    period of their kind, and the host share: the part of the run's span with no device interval
    open, the time the GPU waited on the host."""
    dev = timeline.device_frame()
    fwd = dev[dev.phase == "forward"].sort_values("start_ns")
    if len(fwd) < 2:
        return {}
    steps = timeline.steps_frame().set_index("step")
    starts = fwd.start_ns.to_numpy()
    periods = np.diff(starts) / 1e6
    ids = fwd.step.to_numpy()[:-1]
    kinds = steps.kind.reindex(ids).to_numpy()
    medians = {k: float(np.median(periods[kinds == k])) for k in set(kinds)}
    ratio = periods / np.array([medians[k] for k in kinds])
    slowest = np.argsort(-ratio)[:SLOWEST_STEPS]
    spans = dev.sort_values("start_ns")[["start_ns", "end_ns"]].to_numpy()
    busy, end = 0, spans[0, 0]
    for s, e in spans:  # the union of the device intervals
        if e > end:
            busy += e - max(s, end)
            end = e
    span = spans[:, 1].max() - spans[0, 0]
    return {
        "step_ms_max": float(periods.max()),
        # Prefills differ in size by design; decode steps of one run should not.
        "slow_steps": int((ratio[kinds == "decode"] > SLOW_STEP_X).sum()),
        "slowest_steps": [
            {
                "step": int(ids[i]),
                "kind": str(kinds[i]),
                "rows": int(steps.batch_size.get(ids[i], 0)),
                "period_ms": float(periods[i]),
                "x_median": float(ratio[i]),
            }
            for i in slowest
        ],
        "host_share": float(1 - busy / span) if span > 0 else float("nan"),
        "outside_steps_s": float(wall_s - span / 1e9),
    }


def flags(summary: dict[str, Any]) -> list[str]:
    """Why a run's wall may not be its configuration's: what happened in its timed region that a
    warm engine should never do. Empty when nothing did."""
    out = []
    for key, what in (
        ("compiles_in_run", "compiled"),
        ("captures_in_run", "captured CUDA graphs"),
        ("new_shapes_in_run", "ran new shapes"),
        ("gc_in_run", "collected garbage"),
        ("alloc_retries_in_run", "allocator retried"),
        ("device_allocs_in_run", "allocated device memory"),
    ):
        if summary.get(key):
            out.append(f"{what} ({summary[key]})")
    if summary.get("slow_steps"):
        slow = counted(summary["slow_steps"], "step")
        out.append(f"{slow} over {SLOW_STEP_X:g}x the run's median")
    return out


@functools.cache
def _unfreeze_at_exit() -> None:
    """Once per process: hand the frozen objects back to the collector at exit, so that the
    interpreter's last collection frees their cycles. Frozen, they outlive it, and extensions that
    check for leaks at exit say so: Triton's printed ~40 lines of them after every CPU sweep."""
    atexit.register(gc.unfreeze)
