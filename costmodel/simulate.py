"""A discrete-event model of the engine loop at depth 1 and 2, for tests and demo reports.

The steps, and the order of the loop's phases, come from the engine's own loop (costmodel.schedule
records its event log, checked against the engine); this module times them with made-up costs: one
host thread running plan / launch / finalize / commit per tick, one GPU stream running each step's
forward then its sampling, a closed loop of `streams` clients. Knobs that the whole-run model must
see through, each with a known answer: an eager prefill whose kernels follow its host launch,
constrained rows (sampling after the commit before), a GPU hand-over between queued ops, unnamed
loop code, start-up time, and a host or GPU that is faster or slower in one run than in another.
The output has the contract's shapes (runs, per-step table, timeline, requests), so everything
downstream of a real trace can be exercised without a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..core.contract import STEP_COLUMNS, STEP_HOST_PHASES
from .model import VLLM_BUCKETS, graph_bucket
from .schedule import Limits, Recording, Request, record

MS = 1_000_000  # ns per ms


@dataclass
class LoopCosts:
    """Phase costs in ms. A decode forward of b rows costs fwd_base + fwd_per_row · bucket(b); a
    prefill
    prefill_base + prefill_per_token · tokens."""

    fwd_base: float = 2.0
    fwd_per_row: float = 0.02
    prefill_base: float = 1.0
    prefill_per_token: float = 0.01
    prefill_launch_per_token: float = (
        0.0  # eager prefill: host ms per prompt token, its kernels follow it
    )
    sampling: float = 0.15
    handoff: float = 0.0  # GPU idle between two ops queued back to back
    plan: float = 0.10
    launch: float = 0.15
    finalize: float = 0.08
    mask_per_row: float = 0.0  # finalize: host ms per constrained row (the grammar's mask)
    commit: float = 0.12
    commit_per_row: float = 0.0
    loop: float = 0.0  # host code between the named phases, per tick
    startup: float = 0.0  # host ms before the first tick
    host_speed: float = 1.0  # every host cost × this (a slower host in this run: > 1)
    gpu_speed: float = 1.0  # every GPU cost × this (a depth-2 forward tax: > 1)
    jitter: float = 0.03  # lognormal sigma on every cost
    buckets: tuple[int, ...] | None = VLLM_BUCKETS

    def forward(self, kind: str, rows: int, tokens: int) -> float:
        if kind == "prefill":
            return self.prefill_base + self.prefill_per_token * tokens
        return self.fwd_base + self.fwd_per_row * graph_bucket(rows, self.buckets)


class _Clock:
    """The host thread and the GPU stream, each a running clock, and the ranges they recorded."""

    def __init__(self, costs: LoopCosts, rng: np.random.Generator):
        self.costs, self.rng = costs, rng
        self.host_ns = self.gpu_free_ns = 0
        self.host: list[tuple[str, int, int, int]] = []
        self.device: list[tuple[str, int, int, int]] = []

    def ns(self, ms: float, speed: float) -> int:
        return int(ms * speed * self.rng.lognormal(0.0, self.costs.jitter) * MS) if ms > 0 else 0

    def on_host(self, phase: str, step: int, ms: float) -> tuple[int, int]:
        start = self.host_ns
        self.host_ns += self.ns(ms, self.costs.host_speed)
        self.host.append((phase, step, start, self.host_ns))
        return start, self.host_ns

    def on_gpu(self, phase: str, step: int, ms: float, ready: int, paced_until: int = 0) -> int:
        """Run an op once it is ready and the stream is free (plus the hand-over); paced_until: an
        eager
        op cannot end before the host has finished issuing it."""
        handoff = self.ns(self.costs.handoff, 1.0)
        start = max(self.gpu_free_ns + handoff, ready)
        self.gpu_free_ns = max(start + self.ns(ms, self.costs.gpu_speed), paced_until)
        self.device.append((phase, step, start, self.gpu_free_ns))
        return self.gpu_free_ns


def simulate_run(
    depth: int,
    streams: int = 8,
    requests: int = 32,
    output_len: int = 64,
    costs: LoopCosts | None = None,
    seed: int = 0,
    run_id: str | None = None,
    *,
    prompt_len: int = 32,
    stop_share: float = 0.0,
    constrained: bool = False,
    max_num_seqs: int | None = None,
    repeat: int = 0,
) -> dict:
    """One run: {"run": metadata dict, "steps": per-step table, "timeline": host + gpu ranges,
    "requests": what each request was asked and produced}.

    stop_share: requests that stop on their own (EOS) before their cap, so depth 2 carries them one
    step as zombies; constrained: every request is under a grammar (and stops on its own).
    """
    costs = costs or LoopCosts()
    rng = np.random.default_rng(seed)
    lengths = np.maximum(1, rng.poisson(output_len, size=requests))
    stops = constrained | (rng.random(requests) < stop_share)
    reqs = [
        Request(prompt_len, int(n), int(n + output_len) if stop else int(n), constrained)
        for n, stop in zip(lengths, stops, strict=True)
    ]
    limits = Limits(max_num_seqs or max(8, streams), 8192, 4096)
    recording = record(reqs, streams, depth, limits)
    schedule = recording.steps
    clock = _Clock(costs, np.random.default_rng(seed + 1))
    _play(recording, costs, clock)

    run_id = run_id or f"sim-d{depth}-s{streams}-{seed}"
    table = _step_table(run_id, depth, schedule, clock)
    timeline = pd.concat(
        [
            pd.DataFrame(clock.host, columns=["phase", "step", "start_ns", "end_ns"]).assign(
                lane="host"
            ),
            pd.DataFrame(clock.device, columns=["phase", "step", "start_ns", "end_ns"]).assign(
                lane="gpu"
            ),
        ]
    ).assign(run_id=run_id)
    request_table = pd.DataFrame(
        [(run_id, i, r.prompt_len, r.output_len, r.max_tokens, r.constrained)
         for i, r in enumerate(reqs)],
        columns=["run_id", "request", "prompt_len", "output_len", "max_tokens", "constrained"],
    )  # fmt: skip
    run = dict(
        run_id=run_id, model="simulated", preset="sim", depth=depth, streams=streams,
        output_len_mean=output_len, mean_generated_len=float(np.mean(lengths)), requests=requests,
        device="simulated", driver="", torch="", nsys_version="", schema_version=2,
        command=f"simulate_run(depth={depth}, streams={streams})", started_at="",
        wall_s=max(clock.host_ns, clock.gpu_free_ns) / 1e9, generated_tokens=int(np.sum(lengths)),
        decode_steps=int((table.kind == "decode").sum()), source="timeline", trace_path="",
        repeat=repeat, profiled=False, prompt_len=prompt_len,
        constraint="detect" if constrained else None, constrained_share=float(constrained),
        max_num_seqs=limits.max_num_seqs, max_num_batched_tokens=limits.max_num_batched_tokens,
        max_model_len=limits.max_model_len,
    )  # fmt: skip
    return {"run": run, "steps": table, "timeline": timeline, "requests": request_table}


def _play(recording: Recording, costs: LoopCosts, clock: _Clock) -> None:
    """Time the loop's event log in the order the loop ran it: plan, launch (and its forward),
    finalize (and its sampling), commit (waiting for its sampled ids); the unnamed loop code at the
    end of each tick."""
    steps = recording.steps.to_dict("records")
    forward_end: dict[int, int] = {}
    sampled_at: dict[int, int] = {}
    clock.host_ns = clock.ns(costs.startup, costs.host_speed)
    ticks = 0  # ticks begun so far
    for tick, phase, i in recording.events:
        while ticks <= tick:  # a new tick: the last one's loop code ran first
            if ticks:
                clock.host_ns += clock.ns(costs.loop, costs.host_speed)
            ticks += 1
        if phase == "plan":  # step i is the one it plans, if it finds one
            clock.on_host("plan", i, costs.plan)
            continue
        s = steps[i]
        if phase == "launch":
            eager = s["kind"] == "prefill" and costs.prefill_launch_per_token > 0
            extra = costs.prefill_launch_per_token * s["tokens"] if eager else 0.0
            start, end = clock.on_host("launch", i, costs.launch + extra)
            forward = costs.forward(s["kind"], s["batch_size"], s["tokens"])
            ready, paced = (start, end) if eager else (end, 0)
            forward_end[i] = clock.on_gpu("forward", i, forward, ready, paced)
        elif phase == "finalize":
            mask = costs.mask_per_row * s["constrained"]
            _, end = clock.on_host("finalize", i, costs.finalize + mask)
            sampled_at[i] = clock.on_gpu("sampling", i, costs.sampling, max(end, forward_end[i]))
        elif phase == "commit":
            start = clock.host_ns
            clock.host_ns = max(clock.host_ns, sampled_at[i])
            clock.host.append(("wait", i, start, clock.host_ns))
            clock.host_ns += clock.ns(
                costs.commit + costs.commit_per_row * s["batch_size"], costs.host_speed
            )
            clock.host.append(("commit", i, start, clock.host_ns))
    if ticks:
        clock.host_ns += clock.ns(costs.loop, costs.host_speed)


def _ms_per_step(ranges: pd.DataFrame, phase: str) -> pd.Series:
    mine = ranges[ranges["phase"] == phase]
    return ((mine["end_ns"] - mine["start_ns"]) / MS).groupby(mine["step"]).sum()


def _step_table(run_id: str, depth: int, schedule: pd.DataFrame, clock: _Clock) -> pd.DataFrame:
    """The contract's per-step table (core.contract.STEP_TABLE) from the recorded ranges."""
    host = pd.DataFrame(clock.host, columns=["phase", "step", "start_ns", "end_ns"])
    device = pd.DataFrame(clock.device, columns=["phase", "step", "start_ns", "end_ns"])
    table = schedule[["step", "kind", "batch_size"]].copy()
    forward = device[device["phase"] == "forward"].set_index("step")
    table["gpu_start_ns"] = table["step"].map(forward["start_ns"])
    for ranges, phases in (
        (device, ("forward", "sampling")),
        (host, STEP_HOST_PHASES),
    ):
        for phase in phases:
            table[f"{phase}_ms"] = table["step"].map(_ms_per_step(ranges, phase)).fillna(0.0)
    table["gpu_end_ns"] = table["step"].map(device.groupby("step")["end_ns"].max())
    table["period_ms"] = (table["gpu_start_ns"].shift(-1) - table["gpu_start_ns"]) / MS
    table["busy_ms"] = table["forward_ms"] + table["sampling_ms"]
    table["kernel_gap_ms"] = 0.0  # spans only, like the in-process timeline
    table["bubble_ms"] = table["period_ms"] - table["busy_ms"]
    table["run_id"], table["depth"] = run_id, depth
    return table[list(STEP_COLUMNS)]
