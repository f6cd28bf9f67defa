"""In-order device queues (streams) and events, on CUDA or emulated on the CPU.

The engine enqueues device work as closures: `stream.submit(fn)`. On CUDA, fn runs at once inside
the stream's context and only *enqueues* kernels. On the CPU there are no streams, so each stream is
a worker thread that runs its closures in order: the host thread goes on with its bookkeeping while
the "device" computes (torch releases the GIL inside its kernels). That gives a CPU run a real
bubble at depth 1 and real overlap at depth 2, with the same engine code.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable

import torch


class CpuEvent:
    def __init__(self) -> None:
        self._done = threading.Event()
        self._done.set()
        self._stream: CpuStream | None = None
        self.t_ns = 0

    def _fire(self) -> None:
        self.t_ns = time.perf_counter_ns()
        self._done.set()

    def synchronize(self) -> None:
        self._done.wait()
        if self._stream is not None and self._stream.error is not None:
            raise RuntimeError("device worker failed") from self._stream.error

    def query(self) -> bool:
        return self._done.is_set()

    def wait_for(self, timeout_s: float) -> bool:
        """Block up to timeout_s; True once fired."""
        return self._done.wait(timeout_s)

    def time_ns(self) -> int:
        return self.t_ns


class CpuStream:
    def __init__(self, name: str):
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"bubblelab-{name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            fn = self._queue.get()
            if fn is None:
                return
            if self.error is not None and not isinstance(fn, _Fire):
                continue  # after a failure, only fire events so the host never hangs
            try:
                fn()
            except BaseException as e:  # surfaced on the host at the next synchronize
                self.error = e

    def submit(self, fn: Callable[[], object]) -> None:
        self._queue.put(fn)

    def record(self, event: CpuEvent) -> None:
        event._done.clear()
        event._stream = self
        self._queue.put(_Fire(event))

    def wait(self, event: CpuEvent) -> None:
        def wait_and_check() -> None:  # a failure upstream fails this stream too: no stale reads
            event._done.wait()
            if event._stream is not None and event._stream.error is not None:
                raise RuntimeError("device worker failed") from event._stream.error

        self._queue.put(wait_and_check)

    def close(self) -> None:
        self._queue.put(None)


class _Fire:
    def __init__(self, event: CpuEvent):
        self.event = event

    def __call__(self) -> None:
        self.event._fire()


class CudaEvent:
    def __init__(self, clock: CudaClock, timing: bool, external: bool = False):
        # external: recorded inside a CUDA graph it becomes a node, re-recorded by every replay.
        self.event = torch.cuda.Event(enable_timing=timing, external=external)
        self._clock = clock

    def synchronize(self) -> None:
        self.event.synchronize()

    def query(self) -> bool:
        return self.event.query()

    def wait_for(self, timeout_s: float) -> bool:
        """Spin on the event up to timeout_s (as a spin-mode synchronize would); True once fired."""
        end = time.perf_counter() + timeout_s
        while not self.event.query():
            if time.perf_counter() > end:
                return False
        return True

    def time_ns(self) -> int:
        return self._clock.to_host_ns(self.event)


class CudaClock:
    """Maps CUDA event times onto the host perf_counter_ns clock.

    An event's time is its elapsed time since a reference event, whose host time was read when a
    synchronize on it returned. Two things degrade that mapping over a long run, so it is kept
    fresh:
    - cudaEventElapsedTime is float32 milliseconds: 600 s after the reference it resolves only
      ~40 us. So `calibrate()` takes a new reference at the start of every measured run.
    - the GPU's timer and the host's clock drift apart (tens of ppm: tens of microseconds over a few
      seconds). So `anchor()` re-pins the mapping whenever the host has just woken from a wait that
      really blocked: the awaited event completed no later than the wake-up (within a spin-wait's
      few us).
    A wake-up is an upper bound on the event's time: a late one (a descheduled thread) would drag
    the mapping late, so an anchor moves it earlier in full (the event cannot have completed after
    the wake-up) but later by at most LATE_STEP_NS, enough to follow the drift (~1 us a step
    measured on the H200). `anchored_us` keeps each correction applied.
    """

    LATE_STEP_NS = 5_000

    def __init__(self) -> None:
        self.anchored_us: list[float] = []
        self.calibrate()

    def calibrate(self) -> None:
        self.ref = torch.cuda.Event(enable_timing=True)
        self.ref.record()
        self.ref.synchronize()
        self.ref_ns = time.perf_counter_ns()
        self.anchored_us.clear()

    def to_host_ns(self, event: torch.cuda.Event) -> int:
        return self.ref_ns + int(self.ref.elapsed_time(event) * 1e6)

    def anchor(self, event: torch.cuda.Event, woke_ns: int) -> None:
        """`event` completed while the host was blocked on it, and the host woke at `woke_ns`."""
        shift = min(woke_ns - self.to_host_ns(event), self.LATE_STEP_NS)
        self.ref_ns += shift
        self.anchored_us.append(shift / 1e3)


class CudaStream:
    def __init__(self, stream: torch.cuda.Stream):
        self.stream = stream

    def submit(self, fn: Callable[[], object]) -> None:
        with torch.cuda.stream(self.stream):
            fn()

    def record(self, event: CudaEvent) -> None:
        event.event.record(self.stream)

    def wait(self, event: CudaEvent) -> None:
        self.stream.wait_event(event.event)


class Streams:
    """The compute stream (forwards and sampling, in order) and the copy stream (results, masks)."""

    def __init__(self, device: torch.device, timing: bool = True):
        self.device = device
        self.is_cuda = device.type == "cuda"
        self.timing = timing
        self.compute: CudaStream | CpuStream
        self.copy: CudaStream | CpuStream
        if self.is_cuda:
            self.clock = CudaClock()
            self.compute = CudaStream(torch.cuda.current_stream(device))
            self.copy = CudaStream(torch.cuda.Stream(device))
        else:
            self.compute = CpuStream("compute")
            self.copy = CpuStream("copy")

    def event(self, external: bool = False):
        return CudaEvent(self.clock, self.timing, external) if self.is_cuda else CpuEvent()

    def calibrate(self) -> None:
        """A fresh clock reference for device times (CUDA); the CPU device thread uses host time."""
        if self.is_cuda:
            self.clock.calibrate()

    def wait(self, event, check: Callable[[], None] | None = None) -> None:
        """Block the host until `event` has fired. On CUDA, a wait that really blocked also
        re-anchors the device clock (CudaClock.anchor). `check` (tensor parallel) runs every CHECK_S
        while the event has not fired: it raises when a peer process died or hangs, so the host
        never waits on it forever."""
        if check is not None:
            self._watched_wait(event, check)
            return
        if not self.is_cuda or event.query():
            event.synchronize()
            return
        event.synchronize()
        self.clock.anchor(event.event, time.perf_counter_ns())

    CHECK_S = 0.05

    def _watched_wait(self, event, check: Callable[[], None]) -> None:
        blocked = not event.query()
        while not event.wait_for(self.CHECK_S):
            check()
        event.synchronize()  # on the CPU: raises what the device worker raised
        if blocked and self.is_cuda:
            self.clock.anchor(event.event, time.perf_counter_ns())

    def drain(self, check: Callable[[], None]) -> None:
        """Block until both streams' queued work has run, watched: `check` runs while it has not
        (tensor parallel: a peer that died or hangs fails the wait instead of blocking it)."""
        for stream in (self.compute, self.copy):
            done = self.event()
            stream.record(done)
            self.wait(done, check)

    def synchronize(self) -> None:
        if self.is_cuda:
            torch.cuda.synchronize(self.device)
        else:
            for stream in (self.compute, self.copy):
                assert isinstance(stream, CpuStream)
                ev = CpuEvent()
                stream.record(ev)
                ev.synchronize()

    def close(self) -> None:
        for stream in (self.compute, self.copy):
            if isinstance(stream, CpuStream):  # a CPU stream's worker thread ends
                stream.close()
