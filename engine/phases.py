"""Named host phases (core.contract.HOST_PHASES), each one NVTX range (domain core.contract.DOMAIN,
payload = step id) and one timeline record.

The engine wraps every phase of its loop in `phases.range(name, step)`. It runs on every tick, so
it is a small class rather than a generator, and with NVTX off and no timeline it hands back one
shared no-op.
"""

from __future__ import annotations

import time
from contextlib import nullcontext

from ..core.contract import DOMAIN
from ..core.timeline import StepInfo, Timeline

_NOTHING = nullcontext()


class _Range:
    __slots__ = ("phases", "name", "step", "start")

    def __init__(self, phases: Phases, name: str, step: int):
        self.phases, self.name, self.step = phases, name, step

    def __enter__(self) -> None:
        p = self.phases
        if p._domain is not None:
            p._domain.push_range(
                p._domain.get_event_attributes(message=self.name, payload=self.step)
            )
        self.start = time.perf_counter_ns()

    def __exit__(self, *exc) -> None:
        p = self.phases
        if p.timeline is not None:
            p.timeline.add_host(self.name, self.step, self.start, time.perf_counter_ns())
        if p._domain is not None:
            p._domain.pop_range()


class Phases:
    def __init__(self, *, nvtx_enabled: bool = False, timeline: Timeline | None = None):
        self.timeline = timeline
        self._domain = None
        if nvtx_enabled:
            # Imported only when profiling: the package is cheap but optional at run time.
            import nvtx

            # Plain-string messages: nsys stores each distinct one once (StringIds); registered
            # strings break nvtx's attribute builder once a profiler is attached.
            self._domain = nvtx.get_domain(DOMAIN)

    @property
    def nvtx_enabled(self) -> bool:
        """NVTX ranges on: the run is being profiled (under nsys)."""
        return self._domain is not None

    def range(self, name: str, step: int):
        if self._domain is None and self.timeline is None:
            return _NOTHING
        return _Range(self, name, step)

    def step_meta(self, info: StepInfo, depth: int) -> None:
        """A mark carrying the step's kind and batch size, so an nsys trace is self-describing."""
        if self._domain is not None:
            msg = f"kind={info.kind} bs={info.batch_size} tokens={info.tokens} depth={depth}"
            self._domain.mark(self._domain.get_event_attributes(message=msg, payload=info.step))
        if self.timeline is not None:
            self.timeline.add_step(info)
