"""What pipelining would buy an engine bubblelab did not build, from one trace of its blocking loop.

The post's model, speedup = T_block / T_pipe x (1 - z), with T_pipe predicted from the blocking
trace alone, step by step, as the slower of what the GPU and the host still have to do once the loop
is pipelined (README.md, "From depth 1 alone"):

- GPU: the step's GPU work with its own gaps, period - bubble (profiling's foreign per-step table:
  forward_ms = busy + the gaps between kernels below the kernel-gap threshold). Pipelining removes
  the bubble, not the launch gaps between kernels, and each launch the host was late for still
  costs the GPU a hand-over once queued, priced from the trace's queued launches
  (costmodel.foreign_handover).
- host: period - wait, where wait is the time the engine thread sat in the step's host syncs. The
  rest of the period is the host's own work (bookkeeping, scheduling, launching), which a pipelined
  loop still does once a step, under the GPU's work instead of before it.

Under nsys every CUDA-graph launch holds the host far longer than unprofiled, all of it exposed in a
blocking loop, so the trace's T_block is the profiled engine's. Measured on our engine (qwen3-0.6b,
docs/foreign-traces.md): ~0.25 ms a launch traced node by node (--cuda-graph-trace=node), ~0.10 ms
traced whole (=graph), 3.5-7.7 us unprofiled (H200, docs/measurements.md section 8). Given the
launches (`graph_launches`), the prediction says so, names their host time, and is marked an
upper bound for the unprofiled engine (`bound`) where the GPU's work outlasts the host's without
them.

A measured speedup is a wall clock, which sums every step; so the result also carries `whole_run`:
the same gain over every step of the trace (prefills, the ramp-down, the slow host ticks), with the
profiler's host time a step from the engine's own mean step (`mean_step_ms`) and the steps depth 2
adds replayed from the workload's shape (`extra_steps`, costmodel.schedule.extra_steps).

Inputs are profiling's tables (the per-step table, the sync summary, the node-traced graph
launches, the launch gaps); profiling never imports this.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..core.checks import check_float
from ..core.errors import BubblelabError
from ..core.steady import WARMUP_STEPS, steady_state
from .bootstrap import check_n_boot, interval
from .foreign_handover import NOT_SEEN, Handover, handover
from .foreign_zombies import zombie_tax
from .model import host_tick_ms, pct, pipelined_period, speedup, step_gpu_ms

# Measured on bubblelab's own engine, depth 1 traced against depth 2 unprofiled
# (docs/foreign-traces.md, "Where the lean comes from"): the profiler's cost on the GPU's side,
# which the figure inherits.
GPU_UNDER_NSYS = (
    "nsys also lengthens the GPU's side: on bubblelab's engine (H200) the traced GPU work a step "
    "ran up to 0.7% over unprofiled and a queued hand-over 1.2-1.4x, so the figure may run low by "
    "up to ~1 point near +30%."
)
CLOCK_KEPT = (  # costmodel.power: a run directory's depth 1 has power samples; a trace has none
    "The GPU's clock is taken to hold: kept busy through what was its bubble, a GPU that reaches "
    "its power limit lowers its clock and each step's GPU work grows, which a trace without power "
    "samples cannot show (on an H200, seven configurations of 1.7b-8b models at 64-256 streams "
    "ran 2-16% slower clocks pipelined, and the forecasts from depth 1 were 0.6-6.5 points high)."
)


def pipelining_gain(
    steps: pd.DataFrame,
    *,
    output_len: float | None = None,
    extra_syncs: str | None = None,
    graph_launches: pd.DataFrame | None = None,
    warmup: int = WARMUP_STEPS,
    n_boot: int = 1000,
    seed: int = 0,
    step_ms: float | None = None,
    zombies: bool = True,
    mean_step_ms: float | None = None,
    extra_steps: float = 0.0,
    launch_gaps: pd.DataFrame | None = None,
    known_from: str = "given",
) -> dict:
    """The predicted throughput gain (percent) of pipelining the loop a foreign run's per-step table
    shows, with its 95% interval and the assumptions it rests on (`assumptions`, sentences for the
    reader).

    output_len: the mean number of tokens a request generates (L, for the zombie tax z = 1/L, its
    upper bound); default: the run's decode steps + 1 (one batch that started and finished inside
    the trace), a guess where requests joined mid-run, whose interval then reaches the tax at the
    admissions' cadence (costmodel.foreign_zombies; `z_max`, `output_len_source`). known_from:
    where output_len came from, as its assumption says it ("given", "recorded with the trace").

    extra_syncs: how the run's mid-step host syncs read (e.g. "128 x cudaStreamSynchronize"), if
    any. graph_launches: the run's traced graph launches (step, host_ms,
    whole), if any: the result then carries `graph_launch_ms` (their median host time),
    `graph_launch_share` (of the step's host time), `graph_trace` ("node" or "graph") and `bound`
    ("upper" where the number bounds the unprofiled engine's gain from above, else None), and its
    first assumption says so. The interval resamples the steady steps (jointly for T_block
    and T_pipe) and spans z from z_max (1/L, or the cadence's; low end) to 0 (high end).

    step_ms: the engine's own unprofiled time a decode step (its inter-token latency at this batch,
    from its logs or a run without the profiler). It replaces the trace's T_block, and the traced
    period's excess over it is taken as host time the profiler added: each step's host work loses
    it, the GPU's work (which the trace times right) stays. The result carries
    `t_block_source` "given" and no `bound`.

    zombies: False where every request stops at a length the engine knows when it launches a step
    (max_tokens with ignore_eos) and it launches none past it: z = 0, the interval too.

    The result's `whole_run` is the same gain over every step of the trace in order (prefills, the
    ramp-down and the slow steps a median leaves out), as a measured wall clock sums them
    (_whole_run). mean_step_ms: the engine's own unprofiled time a step averaged over a whole run
    of this workload (its wall clock over its steps); the whole-run figure then takes the traced
    mean period's excess over it as the profiler's host time a step (else step_ms's, else none).
    extra_steps: how many more steps depth 2 takes than depth 1 on this workload, as a share
    (costmodel.schedule.extra_steps on its shape); the whole run's pipelined sum grows by it.

    launch_gaps: the trace's launch gaps (profiling.foreign.launch_handovers): each step's GPU
    work once pipelined gains the GPU's hand-over between queued launches the trace shows
    (costmodel.foreign_handover; `handover_ms`, None where it shows none).
    """
    if output_len is not None:
        check_float("output_len", output_len, 1, 1e6)
    check_n_boot(n_boot)
    steady = steady_state(steps, warmup)
    if steady.empty:
        raise BubblelabError("no steady decode steps to predict from")
    handed = handover(launch_gaps, steady["step"])
    traced_gpu, host = step_gpu_ms(steady), host_tick_ms(steady)
    gpu = traced_gpu + (handed.added_ms(steady) if handed else 0.0)
    period = steady["period_ms"].to_numpy(float)
    traced = float(np.median(period))
    given = None
    if step_ms is not None:
        given = _given_step(step_ms, traced, float(traced_gpu.median()))
        host = (host - given["added_ms"]).clip(lower=0.0)
        period = np.full(len(period), float(step_ms))
    pipe = pipelined_period(gpu, host).to_numpy(float)
    t_block, t_pipe = float(np.median(period)), float(np.median(pipe))
    tax = zombie_tax(steps, output_len, zombies, known_from)
    z = tax.z
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(steady), size=(n_boot, len(steady)))
    boot_block, boot_pipe = np.median(period[picks], axis=1), np.median(pipe[picks], axis=1)
    lo = interval(pct(speedup(boot_block, boot_pipe, tax.z_max)))[0]
    hi = interval(pct(speedup(boot_block, boot_pipe, 0.0)))[1]
    gpu_ms, host_ms = float(traced_gpu.median()), float(host.median())
    profiled = None if given else _traced_launches(graph_launches, steady, gpu, host)
    block_line = (
        given["line"]
        if given
        else f"T_block = {t_block:.3f} ms: the median period of {len(steady)} steady decode steps "
        "of the trace."
    )
    tail = (  # the bound is the median step's; the wall clock also sums the slow ones
        "A whole run whose steps have a slow tail (a host that stalls now and then) can gain more "
        "than that bound: the median leaves the tail out, the wall clock does not."
    )
    assumptions = [
        *([profiled["line"]] if profiled else []),
        *([tail] if profiled and profiled["bound"] == "upper" else []),
        block_line,
        f"T_pipe = {t_pipe:.3f} ms: per step the slower of the GPU's work (period - bubble, median "
        f"{gpu_ms:.3f} ms: kernels and their gaps stay"
        + (", plus the hand-over below" if handed else "")
        + f") and the host's (period - sync waits, median {host_ms:.3f} ms: done once "
        "a step, under the GPU's work); pipelining moves the host's work, it does not shorten it.",
        handed.line(steady) if handed else NOT_SEEN,
        tax.line,
        "The interval: steps resampled (95%)"
        + (f", z from {tax.z_max:.4f} (low end) to 0 (high end)." if zombies else "."),
        *(
            []
            if given
            else [
                "Under nsys the host runs slower (every CUDA call traced; graph launches most), "
                "which inflates the host side and the bubble: the unprofiled engine gains less "
                "(costmodel/README.md); --step-ms gives the engine's own step time instead."
            ]
        ),
        GPU_UNDER_NSYS,
        CLOCK_KEPT,
    ]
    if extra_syncs:
        assumptions.append(
            f"The loop also waits for the GPU mid-step ({extra_syncs}): each such wait would drain "
            "a "
            "pipelined loop, so the number assumes they go (done on the GPU, or read a step late)."
        )
    return {
        "speedup_pct": round(pct(speedup(t_block, t_pipe, z)), 3),
        "interval_pct": [round(lo, 3), round(hi, 3)],
        "t_block_ms": round(t_block, 6),
        "t_block_source": "given" if given else "trace",
        **({"t_block_traced_ms": round(traced, 6)} if given else {}),
        "t_pipe_ms": round(t_pipe, 6),
        "gpu_ms": round(gpu_ms, 6),
        "handover_ms": round(handed.ms, 6) if handed else None,
        "handover_samples": handed.samples if handed else 0,
        "host_ms": round(host_ms, 6),
        "z": round(z, 6),
        "z_max": round(tax.z_max, 6),
        "output_len": tax.L,
        "output_len_source": tax.source,
        "steps": int(len(steady)),
        "whole_run": _whole_run(
            steps,
            given["added_ms"] if given else 0.0,
            (z, tax.z_max),
            rng,
            n_boot,
            mean_step_ms,
            extra_steps,
            handed,
        ),
        **({k: v for k, v in profiled.items() if k != "line"} if profiled else {}),
        "assumptions": assumptions,
    }


def _whole_run(
    steps: pd.DataFrame,
    added_ms: float,
    zs: tuple[float, float],
    rng: np.random.Generator,
    n_boot: int,
    mean_step_ms: float | None = None,
    extra_steps: float = 0.0,
    handed: Handover | None = None,
) -> dict:
    """The gain over every step of the trace with a period, in order: the blocking wall is the sum
    of their periods, the pipelined one the sum of max(GPU work, host work) a step (the host work of
    a depth-1 period launches the next step, which depth 2 does under this one's GPU work). With
    --step-ms each step loses the profiler's host time (added_ms) from its host work and its period,
    never below its GPU work; with --mean-step-ms that time is the traced mean period's excess over
    the given mean. Where the engine's own step is the slower (its host ran slower than in the
    traced run), added_ms is negative and each step gains the difference as host work: the GPU's
    work is what the trace times right, so the rest of the engine's step is the host's.
    extra_steps (depth 2's more steps, a share) lengthens the pipelined sum, and `handed` (the
    hand-over) each step's GPU work in it. zs: the headline's z and the interval's low end's; the
    interval resamples the steps (95%), z from the second to 0."""
    z, z_max = zs
    check_float("extra_steps", extra_steps, -0.5, 1.0)
    timed = steps.sort_values("step")
    timed = timed[timed["period_ms"].notna()]
    gpu, host = step_gpu_ms(timed).to_numpy(float), host_tick_ms(timed).to_numpy(float)
    period = timed["period_ms"].to_numpy(float)
    if len(period) == 0:
        raise BubblelabError("no step with a period to predict the whole run from")
    if mean_step_ms is not None:
        check_float("mean_step_ms", mean_step_ms, 1e-6, 1e9)
        if mean_step_ms < 0.98 * gpu.mean():
            raise BubblelabError(
                f"--mean-step-ms {mean_step_ms:g} is shorter than the GPU's mean work a step in "
                f"the trace ({gpu.mean():.3f} ms): give the unprofiled wall clock over the steps "
                "of a run of the same engine and workload"
            )
        added_ms = float(period.mean()) - mean_step_ms  # signed: see the docstring
    block = np.maximum(period - added_ms, gpu)
    queued = gpu + (handed.added_ms(timed).to_numpy(float) if handed else 0.0)
    pipe = np.maximum(queued, np.clip(host - added_ms, 0.0, None)) * (1.0 + extra_steps)
    if pipe.sum() <= 0:
        raise BubblelabError("no GPU or host work to predict the whole run from")
    picks = rng.integers(0, len(block), size=(n_boot, len(block)))
    boot_block, boot_pipe = block[picks].sum(axis=1), pipe[picks].sum(axis=1)
    lo = interval(pct(speedup(boot_block, boot_pipe, z_max)))[0]
    hi = interval(pct(speedup(boot_block, boot_pipe, 0.0)))[1]
    kinds = timed["kind"].value_counts().to_dict()
    return {
        "speedup_pct": round(pct(speedup(block.sum(), pipe.sum(), z)), 3),
        "interval_pct": [round(lo, 3), round(hi, 3)],
        "wall_block_ms": round(float(block.sum()), 6),
        "wall_pipe_ms": round(float(pipe.sum()), 6),
        "steps": int(len(block)),
        "prefill_steps": int(kinds.get("prefill", 0)),
        "profiler_ms": round(added_ms, 6),
        "extra_steps": round(extra_steps, 6),
        "profiler_source": "mean step (given)"
        if mean_step_ms is not None
        else ("step time (given)" if added_ms else "none"),
        "line": _whole_line(
            len(block),
            kinds.get("prefill", 0),
            block.sum(),
            pipe.sum(),
            added_ms,
            mean_step_ms,
            extra_steps,
        ),
    }


def _whole_line(
    steps: int,
    prefills: int,
    block_ms: float,
    pipe_ms: float,
    added_ms: float,
    mean_step_ms: float | None,
    extra_steps: float,
) -> str:
    """The whole-run figure's assumptions, in sentences."""
    parts = [
        f"Over the whole trace ({steps} steps with a period, {prefills} of them prefill-like): "
        f"{block_ms:.1f} ms of blocking periods against {pipe_ms:.1f} ms pipelined (each step the "
        "slower of its GPU and host work)."
    ]
    if added_ms:
        own = (
            f"the engine's own mean step ({mean_step_ms:.3f} ms, given)"
            if mean_step_ms is not None
            else "the given step time"
        )
        parts.append(
            f"Each step is {added_ms:.3f} ms shorter in its period and its host work: the "
            f"profiler's host time, the traced mean period's excess over {own}."
            if added_ms > 0
            else f"Each step is {-added_ms:.3f} ms longer in its period and its host work: "
            f"{own} is that much over the traced mean period, and the GPU's work is the trace's, "
            "so the rest is host time the traced run did not spend."
        )
    if extra_steps:
        parts.append(
            f"Depth 2 takes {extra_steps:.2%} more steps on this workload (its admission a tick "
            "later, replayed from the workload's shape): the pipelined sum is that much longer."
        )
    else:
        parts.append(
            "The steps an admission a tick later adds at depth 2 (0.4% at 1 stream, 1-1.8% at 32 "
            "and 128 streams of 4 requests each on bubblelab's engine) are left out: give the "
            "workload's shape (--streams) to replay them."
        )
    return " ".join(parts)


def _given_step(step_ms: float, traced_ms: float, gpu_ms: float) -> dict:
    """The profiler's share of the traced step, from the engine's own step time (negative where
    the engine's step is the slower: host time the traced run did not spend); refused where that
    time is shorter than the GPU's traced work (a different batch or engine than the trace's, or
    the GPU side slowed too)."""
    check_float("step_ms", step_ms, 1e-6, 1e9)
    if step_ms < 0.98 * gpu_ms:
        raise BubblelabError(
            f"--step-ms {step_ms:g} is shorter than the GPU's work a step in the trace "
            f"({gpu_ms:.3f} ms): give the unprofiled step time of the same engine at the same "
            "batch as the trace"
        )
    added = traced_ms - step_ms
    head = (
        f"T_block = {step_ms:.3f} ms: the engine's own step time (given), where the trace's steps "
        f"take {traced_ms:.3f} ms; "
    )
    line = head + (
        f"the {added:.3f} ms more is taken as host time the profiler added (CUDA calls traced) "
        "and comes off each step's host work."
        if added >= 0
        else f"the engine's {-added:.3f} ms more is taken as host time the traced run did not "
        "spend (its host ran faster) and is added to each step's host work."
    )
    return {"added_ms": added, "line": line}


def _traced_launches(
    launches: pd.DataFrame | None, steady: pd.DataFrame, gpu: pd.Series, host: pd.Series
) -> dict | None:
    """What nsys's tracing of the CUDA graphs did to the steady steps' host time: the median launch,
    its share of the step's host time, the bound the prediction is, and the assumption line."""
    if launches is None or launches.empty:
        return None
    launches = launches[launches["step"].isin(steady["step"])]
    if launches.empty:
        return None
    per_step = launches.groupby("step")["host_ms"].sum().reindex(steady["step"], fill_value=0.0)
    host_ms = host.to_numpy(float)
    share = float(np.median(per_step.to_numpy(float) / np.where(host_ms > 0, host_ms, np.nan)))
    launch_ms = float(launches["host_ms"].median())
    whole = bool(launches["whole"].all())
    # Without the profiler's launch time the host's work shrinks; while the GPU's still outlasts it,
    # T_pipe (the GPU's) stays and T_block loses the exposed launch time: the gain only falls.
    upper = float(gpu.median()) >= float(host.median()) - float(per_step.median())
    what = (
        "an upper bound for the unprofiled engine's at its median step"
        if upper
        else "not the unprofiled engine's (its host would still outlast the GPU: more or less)"
    )
    how = "whole (one row a replay)" if whole else "node by node"
    advice = (
        "time its blocking loop unprofiled to know by how much"
        if whole
        else "profile with --cuda-graph-trace=graph to shrink the gap"
    )
    line = (
        f"nsys traced the CUDA graphs {how}: each cudaGraphLaunch held the host {launch_ms:.3f} ms "
        f"(median; a few us unprofiled), {len(launches) / len(steady):.3g} a step, {share:.0%} "
        f"of the step's host time. The gain is the profiled engine's, {what}; {advice}."
    )
    return {
        "graph_launch_ms": round(launch_ms, 6),
        "graph_launch_share": round(share, 6),
        "graph_trace": "graph" if whole else "node",
        "bound": "upper" if upper else None,
        "line": line,
    }
