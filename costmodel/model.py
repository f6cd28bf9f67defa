"""The post's cost model of the bubble: speedup = T_block / T_pipe × (1 − z).

T_block is the decode-step period of the blocking loop (depth 1), T_pipe the period of the pipelined
loop (depth 2), and z the zombie tax: the share of pipelined GPU time spent on rows of requests that
had already finished when their step was launched.

Deriving z. A closed loop of S streams keeps S requests decoding; each generates L tokens, so
producing N·L tokens takes N·L/S steps of period g(S), where g(b) is the GPU time of a step with b
rows. At depth 2, step t+1 is planned before step t commits, so a request that finishes at t rides
along in t+1 as a zombie next to the S − 1 live rows: one extra row per finished request, costing
Δ(S) = g(S) − g(S − 1), where g(0) = 0 (no step at all). Spread over the run:

    z(S) = N·Δ(S) / (N·L/S · g(S)) = S·(g(S) − g(S − 1)) / (L·g(S))

- One stream: Δ = g(1), a whole wasted forward, so z = 1/L (the post's "about 1% at L ≈ 110").
- A step cost linear in rows (g = c·b) also gives z = 1/L; a memory-bound step (g ≈ weight bytes /
  bandwidth, flat in b) gives z ≈ 0. So z lies in [0, 1/L] whenever g is concave with g(0) = 0,
  which is why the model's bounds are z = 0 and z = 1/L.
- CUDA graphs: a step of b rows replays the graph of the smallest bucket >= b, so g(b) is really
  g(bucket(b)). When S − 1 and S share a bucket (S = 8 or 32 with vLLM's buckets) the zombie fills a
  padded row and costs nothing: z = 0. When it pushes the step into a bigger bucket (S = 9, 17, ...)
  it costs the jump between graphs, and z can exceed 1/L.

The seat, not the row. This is the tax on GPU time. A loop whose seats are all busy (closed-loop
clients or a backlog) pays another way: depth 2 learns of the finish one step late, so the
replacement request starts one step late and the run needs N/S extra steps: z = 1/(L + 1) at any
batch size. The whole-run model (costmodel.wholerun) charges each finish the right one of the two;
the steady-state table keeps the post's row tax.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import pandas as pd

from ..core.errors import BubblelabError

Period = TypeVar("Period", float, np.ndarray)  # a step period in ms, or an array of them

# vLLM's default CUDA-graph capture sizes: 1, 2, 4, then every multiple of 8.
VLLM_BUCKETS: tuple[int, ...] = (1, 2, 4, *range(8, 513, 8))


def graph_bucket(rows: int, buckets: tuple[int, ...] | None = VLLM_BUCKETS) -> int:
    """Rows the GPU actually runs for a step of `rows` rows: the smallest bucket >= rows.

    Past the largest bucket (or with buckets=None, i.e. eager) the step runs unpadded.
    """
    if rows <= 0:
        return 0
    if not buckets:
        return rows
    i = bisect.bisect_left(buckets, rows)
    return buckets[i] if i < len(buckets) else rows


@dataclass(frozen=True)
class StepCost:
    """g(b): GPU time (ms) of one decode step of b rows, interpolated between measured bucket
    sizes."""

    rows: tuple[int, ...]  # padded (bucket) row counts that were measured, ascending
    ms: tuple[float, ...]  # median GPU time of a step (step_gpu_ms) at each
    buckets: tuple[int, ...] | None = VLLM_BUCKETS

    @classmethod
    def from_points(cls, rows, ms, buckets: tuple[int, ...] | None = VLLM_BUCKETS) -> StepCost:
        frame = pd.DataFrame(
            {"rows": [graph_bucket(int(r), buckets) for r in rows], "ms": list(ms)}
        )
        curve = frame.groupby("rows")["ms"].median().sort_index()
        return cls(
            tuple(int(r) for r in curve.index), tuple(float(v) for v in curve.values), buckets
        )

    @classmethod
    def from_steps(
        cls, steps: pd.DataFrame, buckets: tuple[int, ...] | None = VLLM_BUCKETS
    ) -> StepCost:
        """From a per-step table (docs/phases.md): decode steps' GPU span (step_gpu_ms) by
        batch_size."""
        decode = steps[steps["kind"] == "decode"]
        if decode.empty:
            raise BubblelabError("no decode steps to build a step-cost curve from")
        return cls.from_points(decode["batch_size"], step_gpu_ms(decode), buckets)

    def __call__(self, rows: int) -> float:
        if rows <= 0:
            return 0.0
        # np.interp holds the end values flat outside the measured range: the safe guess for a
        # memory-bound step, and exact in the common case of measuring at the streams' own bucket.
        return float(np.interp(graph_bucket(rows, self.buckets), self.rows, self.ms))


def zombie_tax(L: float, streams: int, cost: StepCost | None = None) -> float:
    """z(S) = S·(g(S) − g(S − 1)) / (L·g(S)); 1/L at one stream or when no step cost is known."""
    if L <= 0:
        raise ValueError(f"mean generated length must be positive, got {L}")
    if streams <= 1 or cost is None:
        return 1.0 / L
    g_s, g_prev = cost(streams), cost(streams - 1)
    # Noise can make a measured curve dip; a zombie row never makes a step cheaper.
    return max(0.0, streams * (g_s - g_prev) / (L * g_s))


def speedup(t_block_ms: Period, t_pipe_ms: Period, z: float) -> Period:
    """The post's model: throughput of depth 2 over depth 1 (1.10 = +10%); on periods or on arrays
    of bootstrap samples of them."""
    return t_block_ms / t_pipe_ms * (1.0 - z)


def speedup_bounds(t_block_ms: float, t_pipe_ms: float, L: float) -> tuple[float, float]:
    """(low, high): the model with the largest (1/L) and the smallest (0) zombie tax."""
    return speedup(t_block_ms, t_pipe_ms, 1.0 / L), speedup(t_block_ms, t_pipe_ms, 0.0)


def step_gpu_ms(steps: pd.DataFrame) -> pd.Series:
    """GPU time of each step that no host overlap can hide: forward + sampling as SPANS, first op to
    last.

    Not the union of the kernels: the gaps between the kernels of one step (a qwen3-0.6b decode
    replays 2,057 of them in one CUDA graph, ~1 ms of gaps under nsys) are the GPU's own, and depth
    2 keeps them (README.md, "From depth 1 alone"). The per-step table's forward_ms/sampling_ms are
    spans since it gained kernel_gap_ms; an older table (kernel unions) falls back to the step's
    span gpu_start..gpu_end.
    """
    spans = steps["forward_ms"].fillna(0) + steps["sampling_ms"].fillna(0)
    if "kernel_gap_ms" in steps or "gpu_end_ns" not in steps:
        return spans
    span = (steps["gpu_end_ns"].astype("Float64") - steps["gpu_start_ns"].astype("Float64")) / 1e6
    return span.astype(float).fillna(spans)


def host_tick_ms(steps: pd.DataFrame) -> pd.Series:
    """Host time per tick that pipelining cannot hide, from a depth-1 table: period - wait.

    At depth 1 the engine thread goes round its loop once per step period, blocked only in `wait`;
    the rest (plan, launch, finalize, commit's bookkeeping, and the unnamed loop code between
    phases) is work that depth 2 still does once per tick on the same thread. The last step has no
    period: the sum of its phases.
    """

    def col(name: str) -> pd.Series:
        return steps[name].fillna(0) if name in steps else pd.Series(0.0, index=steps.index)

    phases = (
        col("plan_ms") + col("launch_ms") + col("finalize_ms") + col("commit_ms") - col("wait_ms")
    )
    return (steps["period_ms"] - col("wait_ms")).fillna(phases).clip(lower=0)


def pipelined_period(gpu_ms, host_ms):
    """T_pipe predicted from its parts: the slower of the GPU's work (step_gpu_ms) and the host's
    tick (host_tick_ms). Pipelining overlaps the two; it shortens neither."""
    return np.maximum(gpu_ms, host_ms)


def whatif_speedup(
    k,
    gpu_ms: float,
    exposed_ms: float,
    z: float,
    host_ms: float | None = None,
    residual_ms: float = 0.0,
):
    """Speedup when the GPU work of a step gets k times longer (k < 1: a faster GPU or a smaller
    model).

    The blocking period runs host and GPU in series: T_block(k) = max(k·gpu + exposed, host), where
    exposed = T_block − gpu is the bubble the host leaves (some host work, e.g. finalize, already
    overlaps the forward at depth 1, and no loop ticks faster than its host). Pipelined: T_pipe(k) =
    max(k·gpu + residual, host), with host the tick's critical path (defaults to the exposed time)
    and residual the idle that depth 2 keeps. Bookkeeping is GPU-speed independent, so the host side
    does not scale with k; z is a ratio of step costs, so it stays put.
    """
    k = np.asarray(k, dtype=float)
    host = exposed_ms if host_ms is None else host_ms
    t_block = np.maximum(k * gpu_ms + exposed_ms, host)
    t_pipe = np.maximum(k * gpu_ms + residual_ms, host)
    return t_block / t_pipe * (1.0 - z)


def whatif_curve(
    blocking_ms: float, pipelined_ms: float, gpu_ms: float, host_ms: float, z: float, ks=None
) -> pd.DataFrame:
    """whatif_speedup over k for one measured configuration, anchored so that k = 1 gives its
    measured T_block / T_pipe × (1 − z). Columns: k, gpu_ms (k × forward + sampling), speedup_pct.

    Idle that the host's phases don't explain (waking up after a sync, OS noise) counts as host
    time, since it cannot be assumed to hide, but no more than the measured pipelined period allows.
    """
    ks = np.logspace(-1.5, 1.5, 200) if ks is None else np.asarray(ks, dtype=float)
    exposed = max(0.0, blocking_ms - gpu_ms)
    residual = max(0.0, pipelined_ms - gpu_ms)
    host = min(max(host_ms, exposed), pipelined_ms)
    # The curve has kinks where GPU and host time cross; sample them (and k = 1) exactly.
    kinks = [
        x
        for x in ((host - exposed) / gpu_ms, (host - residual) / gpu_ms, 1.0)
        if ks[0] < x < ks[-1]
    ]
    k = np.unique(np.concatenate([ks, kinks]))
    s = whatif_speedup(k, gpu_ms, exposed, z, host_ms=host, residual_ms=residual)
    return pd.DataFrame({"k": k, "gpu_ms": k * gpu_ms, "speedup_pct": (s - 1.0) * 100.0})


def pct(ratio):
    """Speedup ratio to percent gained (1.076 -> 7.6); scalars stay scalars."""
    out = (np.asarray(ratio, dtype=float) - 1.0) * 100.0
    return float(out) if out.ndim == 0 else out
