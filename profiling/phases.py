"""Named host phases: one NVTX range (domain "bubblelab", payload = step id) and one timeline record each.

The engine wraps every phase of its loop in `phases.range(name, step)`. With NVTX off and no timeline the
context manager costs two attribute checks, so the loop can always call it.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator

from profiling.timeline import StepInfo, Timeline

DOMAIN = "bubblelab"
HOST_PHASES = ("plan", "launch", "copy_h2d", "forward", "prefill", "finalize", "mask", "sampling",
               "copy_d2h", "commit", "wait")


class Phases:
    def __init__(self, *, nvtx_enabled: bool = False, timeline: Timeline | None = None):
        self.timeline = timeline
        self._nvtx = None
        if nvtx_enabled:
            import nvtx  # only imported when profiling: the package is cheap but optional at run time
            self._nvtx = nvtx
            self._domain = nvtx.get_domain(DOMAIN)

    @contextmanager
    def range(self, name: str, step: int) -> Iterator[None]:
        nv, tl = self._nvtx, self.timeline
        if nv is not None:
            # Plain strings: nsys stores each distinct one once (StringIds); registered strings break
            # nvtx's attribute builder once a profiler is attached.
            self._domain.push_range(self._domain.get_event_attributes(message=name, payload=step))
        start = time.perf_counter_ns() if tl is not None else 0
        try:
            yield
        finally:
            if tl is not None:
                tl.add_host(name, step, start, time.perf_counter_ns())
            if nv is not None:
                self._domain.pop_range()

    def step_meta(self, info: StepInfo, depth: int) -> None:
        """A mark carrying the step's kind and batch size, so an nsys trace is self-describing."""
        if self._nvtx is not None:
            msg = f"kind={info.kind} bs={info.batch_size} tokens={info.tokens} depth={depth}"
            self._domain.mark(self._domain.get_event_attributes(message=msg, payload=info.step))
        if self.timeline is not None:
            self.timeline.add_step(info)
