"""A small discrete-event model of the engine loop at depth 1 and depth 2, for tests and demo
reports.

It plays the loop of docs/phases.md with made-up phase costs: one host thread running plan / launch
/ finalize / commit, one GPU stream running forward then sampling of each step, a closed loop of
`streams` clients. At depth 2 the batch of step t+1 is planned before step t commits, so requests
that finish at t ride along in t+1 as zombies. The output has the contract's shapes (runs, per-step
table, timeline, attribution, gaps), so everything downstream of a real trace can be exercised
without a GPU.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from bubblelab.costmodel.model import VLLM_BUCKETS, graph_bucket

MS = 1_000_000  # ns per ms


@dataclass
class LoopCosts:
    """Phase costs in ms. The forward of b rows costs fwd_base + fwd_per_row · bucket(b)."""

    fwd_base: float = 2.0
    fwd_per_row: float = 0.02
    prefill_per_row: float = 3.0
    sampling: float = 0.15
    plan: float = 0.10
    launch: float = 0.15
    finalize: float = 0.08
    commit: float = 0.12
    jitter: float = 0.03  # lognormal sigma on every cost
    buckets: tuple[int, ...] | None = VLLM_BUCKETS

    def forward(self, kind: str, rows: int) -> float:
        if kind == "prefill":
            return self.prefill_per_row * rows
        return self.fwd_base + self.fwd_per_row * graph_bucket(rows, self.buckets)


@dataclass
class _Request:
    rid: int
    length: int
    produced: int = 0
    finalized: bool = False


@dataclass
class _Loop:
    costs: LoopCosts
    rng: np.random.Generator
    host_ns: int = 0
    gpu_free_ns: int = 0
    host: list = field(default_factory=list)
    device: list = field(default_factory=list)

    def cost_ns(self, ms: float) -> int:
        return int(ms * self.rng.lognormal(0.0, self.costs.jitter) * MS) if ms > 0 else 0

    def host_phase(self, phase: str, step: int, ms: float, not_before: int = 0) -> None:
        start = self.host_ns
        self.host_ns = max(start + self.cost_ns(ms), not_before)
        self.host.append((phase, step, start, self.host_ns))

    def gpu(self, phase: str, step: int, ms: float, not_before: int) -> int:
        start = max(self.gpu_free_ns, not_before)
        self.gpu_free_ns = start + self.cost_ns(ms)
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
) -> dict:
    """One run: {"run": metadata dict, "steps": per-step table, "timeline": host + gpu ranges}."""
    costs = costs or LoopCosts()
    rng = np.random.default_rng(seed)
    lengths = np.maximum(1, rng.poisson(output_len, size=requests))
    todo = deque(_Request(i, int(n)) for i, n in enumerate(lengths))
    waiting = deque(todo.popleft() for _ in range(min(streams, requests)))
    running: list[_Request] = []
    loop = _Loop(costs, np.random.default_rng(seed + 1))
    steps: list[dict] = []
    pending: list[
        tuple[int, list[_Request], int]
    ] = []  # launched, not yet committed: (step, rows, sampled_at)

    def plan_and_launch(step: int) -> bool:
        if waiting:
            kind, rows = "prefill", list(waiting)
            waiting.clear()
            running.extend(rows)
        else:
            kind, rows = "decode", [r for r in running if not r.finalized]
            if not rows:
                return False
        loop.host_phase("plan", step, costs.plan)
        loop.host_phase("launch", step, costs.launch)
        fwd_start = max(loop.gpu_free_ns, loop.host_ns)
        loop.gpu("forward", step, costs.forward(kind, len(rows)), loop.host_ns)
        steps.append(dict(step=step, kind=kind, batch_size=len(rows), gpu_start_ns=fwd_start))
        pending.append((step, rows, 0))
        return True

    def finalize(step: int) -> None:
        loop.host_phase("finalize", step, costs.finalize)
        i = next(i for i, p in enumerate(pending) if p[0] == step)
        pending[i] = (step, pending[i][1], loop.gpu("sampling", step, costs.sampling, loop.host_ns))

    def commit() -> None:
        step, rows, sampled_at = pending.pop(0)
        start = loop.host_ns
        loop.host_phase("wait", step, 0.0, not_before=sampled_at)
        loop.host_ns += loop.cost_ns(costs.commit)
        loop.host.append(("commit", step, start, loop.host_ns))
        for r in rows:
            if r.finalized:  # a zombie: its row was computed, its token is dropped
                continue
            r.produced += 1
            if r.produced >= r.length:
                r.finalized = True
                running.remove(r)
                if todo:  # closed loop: the client sends its next request
                    waiting.append(todo.popleft())

    step = 0
    if depth == 1:
        while plan_and_launch(step):
            finalize(step)
            commit()
            step += 1
    else:
        launched = plan_and_launch(step)
        if launched:
            finalize(step)
        while launched:
            launched = plan_and_launch(step + 1)
            commit()
            if launched:
                finalize(step + 1)
            step += 1

    run_id = run_id or f"sim-d{depth}-s{streams}-{seed}"
    return _tables(run_id, depth, streams, requests, output_len, lengths, loop, steps)


def _ms_per_step(ranges: pd.DataFrame, phase: str) -> pd.Series:
    mine = ranges[ranges["phase"] == phase]
    return ((mine["end_ns"] - mine["start_ns"]) / MS).groupby(mine["step"]).sum()


def _tables(run_id, depth, streams, requests, output_len, lengths, loop, steps) -> dict:
    host = pd.DataFrame(loop.host, columns=["phase", "step", "start_ns", "end_ns"])
    device = pd.DataFrame(loop.device, columns=["phase", "step", "start_ns", "end_ns"])
    table = pd.DataFrame(steps)
    for ranges, phases in (
        (device, ("forward", "sampling")),
        (host, ("plan", "launch", "commit", "finalize", "wait")),
    ):
        for phase in phases:
            table[f"{phase}_ms"] = table["step"].map(_ms_per_step(ranges, phase)).fillna(0.0)
    table["gpu_end_ns"] = table["step"].map(device.groupby("step")["end_ns"].max())
    table["period_ms"] = (table["gpu_start_ns"].shift(-1) - table["gpu_start_ns"]) / MS
    table["busy_ms"] = table["forward_ms"] + table["sampling_ms"]
    table["bubble_ms"] = table["period_ms"] - table["busy_ms"]
    table.insert(0, "run_id", run_id)
    table.insert(3, "depth", depth)
    timeline = pd.concat([host.assign(lane="host"), device.assign(lane="gpu")]).assign(
        run_id=run_id
    )
    wall_ns = max(loop.host_ns, loop.gpu_free_ns)
    run = dict(
        run_id=run_id,
        model="simulated",
        preset="sim",
        depth=depth,
        streams=streams,
        output_len_mean=output_len,
        mean_generated_len=float(np.mean(lengths)),
        requests=requests,
        device="simulated",
        driver="",
        torch="",
        nsys_version="",
        schema_version=1,
        command=f"simulate_run(depth={depth}, streams={streams})",
        started_at="",
        wall_s=wall_ns / 1e9,
        generated_tokens=int(np.sum(lengths)),
        decode_steps=int((table.kind == "decode").sum()),
        source="timeline",
        trace_path="",
    )
    return {"run": run, "steps": table, "timeline": timeline}


def idle_gaps(timeline: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(gaps, attribution) of one run's timeline, shaped like results.json's tables.

    A gap is the idle time between consecutive GPU ranges; each is charged to the host phases that
    overlap it (wait, nested in commit, counts as itself), the rest to "other".
    """
    run_id = timeline["run_id"].iloc[0]
    gpu = timeline[timeline["lane"] == "gpu"].sort_values("start_ns")
    host = timeline[timeline["lane"] == "host"]
    waits = host[host["phase"] == "wait"]
    starts, ends = (
        gpu["start_ns"].to_numpy()[1:],
        np.maximum.accumulate(gpu["end_ns"].to_numpy())[:-1],
    )
    gaps: list[tuple[str, int, float]] = []
    charged: dict[str, float] = {}  # phase -> idle ns it was running during
    for step, g0, g1 in zip(gpu["step"].to_numpy()[1:], ends, starts, strict=True):
        if g1 <= g0:
            continue
        gaps.append((run_id, int(step), (g1 - g0) / MS))
        covered = 0
        for phase, s, e in zip(host["phase"], host["start_ns"], host["end_ns"], strict=True):
            overlap = max(0, min(e, g1) - max(s, g0))
            if overlap and phase == "commit":  # its nested wait is charged on its own
                overlap -= sum(
                    max(0, min(we, e, g1) - max(ws, s, g0))
                    for ws, we in zip(waits["start_ns"], waits["end_ns"], strict=True)
                )
            if overlap > 0:
                charged[phase] = charged.get(phase, 0) + overlap
                covered += overlap
        charged["other"] = charged.get("other", 0) + max(0, (g1 - g0) - covered)
    gaps_df = pd.DataFrame(gaps, columns=["run_id", "step", "gap_ms"])
    attribution = pd.DataFrame(
        [(run_id, p, ns / MS) for p, ns in charged.items() if ns > 0],
        columns=["run_id", "phase", "bubble_ms"],
    )
    return gaps_df, attribution
