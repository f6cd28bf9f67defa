"""The in-process timeline: the same phases NVTX shows, recorded without any profiler attached.

Host ranges come from perf_counter_ns; device intervals (forward, sampling) from CUDA events on a
GPU or from the CPU device worker's own clock, which the engine converts to the same host nanosecond
clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd


@dataclass
class StepInfo:
    step: int
    kind: str  # StepKind value: "decode" | "prefill"
    batch_size: int
    tokens: int


@dataclass
class Timeline:
    depth: int = 0
    # Host and device ranges, each (phase, step, start_ns, end_ns).
    host: list[tuple[str, int, int, int]] = field(default_factory=list)
    device: list[tuple[str, int, int, int]] = field(default_factory=list)
    steps: dict[int, StepInfo] = field(default_factory=dict)
    enabled: bool = True

    def add_host(self, phase: str, step: int, start_ns: int, end_ns: int) -> None:
        if self.enabled:
            self.host.append((phase, step, start_ns, end_ns))

    def add_device(self, phase: str, step: int, start_ns: int, end_ns: int) -> None:
        if self.enabled:
            self.device.append((phase, step, start_ns, end_ns))

    def add_step(self, info: StepInfo) -> None:
        if self.enabled:
            self.steps[info.step] = info

    def clear(self) -> None:
        self.host.clear()
        self.device.clear()
        self.steps.clear()

    def host_frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.host, columns=["phase", "step", "start_ns", "end_ns"])

    def device_frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.device, columns=["phase", "step", "start_ns", "end_ns"])

    def steps_frame(self) -> pd.DataFrame:
        return pd.DataFrame(
            [vars(s) for s in self.steps.values()], columns=["step", "kind", "batch_size", "tokens"]
        )
