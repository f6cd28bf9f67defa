"""The hand-over probe: the GPU's own idle between two steps queued back to back, measured in a run
of either depth before its timed region.

At depth 2 the next step's upload and forward are queued behind this step's sampling, and the GPU
still idles a little between them (`handoff`: the end of one step's sampling to the first node of
the next forward, ~0.01 ms on one H200). A depth-1 run never queues a step behind another, so its
timeline cannot show that idle, and a forecast of depth 2 from depth 1 alone took it as zero: high
by up to a point where steps are short (docs/costmodel-heldout.md).

The probe makes that transition happen on purpose. It holds the compute stream (a spin kernel on
CUDA, a sleep on the CPU device thread), queues behind it what depth 2 queues between two steps:
one slot's sampling, then the other slot's packed upload and decode forward, exactly as the engine
launches them (ModelRunner.enqueue_sampling / enqueue_forward, graphs where the run has them), lets
the stream go, and reads the idle from the same events DecodeSlot.device_times reads for the
timeline (sampling's end, the forward's first node). It never touches a live sequence: both slots
are padded first, so the forward reads the pad row and writes into the scratch page.

A sample whose queuing had not finished when the hold ended is not a queued hand-over: it is
dropped and the hold doubled. The slots alternate as depth 2's do (a slot's forward, then its
sampling behind the other slot's next hold), so under tensor parallelism the workers, handed each
forward and sampling as in a step, replay them in an order they accept; rank 0's stream alone is
held and timed.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass

import numpy as np
import torch

from ..core.pipeline import StepKind
from .decode_slot import DecodeSlot, LaunchRecord
from .model_runner import ModelRunner
from .phases import Phases
from .sampler import SamplingFlags

REPEATS = 21
HOLD_S = 0.002  # how long the stream is held at first: ~20x the host's queuing of two steps
MAX_HOLD_S = 0.1
_NO_RANGES = Phases()  # the probe is no step: no NVTX range, no timeline record


@dataclass(frozen=True)
class HandoffProbe:
    gaps_ms: list[float]  # the idle of each queued hand-over
    dropped: int  # samples whose queuing outlasted the hold (not a queued hand-over)

    @property
    def median_ms(self) -> float:
        return float(np.median(self.gaps_ms)) if self.gaps_ms else float("nan")

    def summary(self) -> dict:
        """The run-summary keys (runs.assemble copies them into the runs table)."""
        gaps = self.gaps_ms
        return {
            "handoff_probe_ms": self.median_ms,
            "handoff_probe_iqr_ms": float(np.subtract(*np.percentile(gaps, [75, 25])))
            if gaps
            else float("nan"),
            "handoff_probe_n": len(gaps),
            "handoff_probe_dropped": self.dropped,
        }


def probe_handoff(
    runner: ModelRunner, rows: int, flags: SamplingFlags, repeats: int = REPEATS
) -> HandoffProbe:
    """`repeats` queued hand-overs between the two slots at a decode batch of `rows`, sampled as
    `flags` says (the run's kind of request). Call it between runs: it pads both slots."""
    rows = max(1, min(rows, runner.max_rows))
    bucket = runner.graphs.decode_bucket(rows)
    width = bucket or rows
    records = [_padded(runner, slot, width, rows, bucket, flags) for slot in runner.slots]
    streams, hold_s = runner.streams, HOLD_S
    streams.calibrate()  # a fresh device-clock reference: the hold's end is read on the host clock
    held = streams.event()
    gaps: list[float] = []
    dropped = 0
    a, b = runner.slots
    runner.forward_on_every_rank(a, records[a.index], _NO_RANGES)  # for the first sampling to read
    while len(gaps) < repeats and dropped < repeats:
        runner.drain()
        streams.compute.submit(_hold(streams.is_cuda, hold_s))
        streams.compute.record(held)
        runner.sample_on_every_rank(a, records[a.index], False, _NO_RANGES)  # its copy back too
        runner.forward_on_every_rank(b, records[b.index], _NO_RANGES)
        queued_ns = time.perf_counter_ns()
        runner.drain()
        a, b = b, a  # b's forward is sampled next, behind the next hold
        if held.time_ns() < queued_ns:  # the stream ran ahead of the host: not a queued hand-over
            dropped += 1
            hold_s = min(2 * hold_s, MAX_HOLD_S)
            continue
        sampling_end = b.device_times(profiled=False)[1][1]
        forward_start = a.device_times(profiled=False)[0][0]
        gaps.append(max(0.0, (forward_start - sampling_end) / 1e6))
    runner.sample_on_every_rank(a, records[a.index], False, _NO_RANGES)  # no forward left unsampled
    runner.drain()
    return HandoffProbe(gaps, dropped)


def _padded(
    runner: ModelRunner,
    slot: DecodeSlot,
    width: int,
    rows: int,
    bucket: int | None,
    flags: SamplingFlags,
) -> LaunchRecord:
    """The slot's inputs for a probe step: every row the pad row (scratch page, position 0), sampled
    with parameters of the run's kind; uploaded once, so its sampling reads them too."""
    slot.pad_decode(0, width)
    h = slot.meta.np
    h["temperature"][:width] = 0.0 if flags.all_greedy else 1.0
    h["top_k"][:width] = flags.max_top_k if flags.any_top_k else 0
    h["top_p"][:width] = 0.9 if flags.any_top_p else 1.0
    h["seed"][:width] = 0
    h["counter"][:width] = 0
    h["step_id"][0] = -1 - slot.index  # no real step's id: a stray commit would refuse it (I6)
    runner.streams.compute.submit(lambda: slot.meta.upload(slot.decode_nbytes))
    record = LaunchRecord(-1 - slot.index, StepKind.DECODE, rows, flags, bucket=bucket)
    record.nbytes = slot.decode_nbytes
    slot.record = record
    return record


def _hold(cuda: bool, seconds: float):
    """A closure that holds the stream for about `seconds`."""
    if cuda:
        cycles = int(seconds * _spin_cycles_per_s())
        return lambda: torch.cuda._sleep(cycles)
    return lambda: time.sleep(seconds)


@functools.cache
def _spin_cycles_per_s() -> float:
    """torch.cuda._sleep spins for a number of GPU clock cycles: how many take a second here."""
    cycles = 2_000_000
    torch.cuda._sleep(cycles)  # the first launch pays for loading the kernel
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    return cycles / max(start.elapsed_time(end) / 1e3, 1e-6)
