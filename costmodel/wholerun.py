"""Whole-run model: predict the pipelined run's wall clock from the blocking run's actual step
sequence.

The per-step ratio T_block / T_pipe describes the steady state only. A real run also has prefill
steps, admission and an end-of-run ramp-down where the batch shrinks to nothing, and at a few ms per
step those are a visible slice of the wall (the post's B200 32-stream row). So instead of one ratio
we replay the depth-1 step sequence and sum predicted depth-2 periods:

    wall_2 = overhead + host_1 + Σ_t max(own_t, host_t+1) + Σ zombie costs

- host_t = the host work of tick t (model.host_tick_ms: period − wait at depth 1): plan, launch,
  finalize and commit's bookkeeping. At depth 2, tick t+1 runs while the GPU executes step t, so
  step t's period is the slower of the two. This pairs each step with the NEXT tick, not its own: a
  host-bound prefill (eager, ~35 ms of Python launching kernels one by one) launched as step t+1
  hides the whole GPU work of decode step t under it, which the same-step pairing max(gpu_t, host_t)
  cannot see.
- own_t = the GPU work of step t that its own launch does not pace (own_gpu_ms). A graph replay is
  enqueued at once and runs on its own: own = its span (model.step_gpu_ms). An eager prefill's
  kernels start while its launch is still issuing them, so its span stretches over the launch; that
  part is already inside host_t and must not be counted again on the GPU side.
- host_1: the first tick has nothing to overlap.
- overhead = wall_1 − Σ_t period_t: time outside steps (start-up, tokenizer, ...), assumed the same
  at depth 2.
- zombies: f_t requests finish at decode step t (f_t = b_t + rows admitted before the next decode
  step − b_next). Depth 2 learns this one step late, so each of them holds its seat for one more
  step:
  * replaced by a waiting request (the loop is seat-limited): the replacement starts a step later,
    so the run needs 1/b_t of a step more per finished request: f·T_pipe,t/b_t. At one stream that
    is the whole wasted step; at any batch it adds up to z = 1/(L + 1), not the row cost below.
  * not replaced (the ramp-down: nothing waiting): the zombie rides in the next decode step as one
    more row, g(b + f) − g(b), the post's "almost free" row; after the last step it costs a step of
    its own.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from bubblelab.costmodel.model import StepCost, host_tick_ms, pipelined_period, step_gpu_ms


def own_gpu_ms(steps: pd.DataFrame) -> pd.Series:
    """GPU time of each step that its own launch does not pace, from a depth-1 table.

    At depth 1 a tick runs plan, launch, finalize, then waits; the step's GPU span ends inside that
    wait. The part of the span the host spent neither in finalize nor waiting ran under the launch.
    For an eager step (the prefill: Python issuing kernels one by one) that is most of the span, and
    it is the host's pace, not the GPU's: it sits inside host_tick_ms already and depth 2 cannot run
    it sooner. A graph replay is issued whole; its first kernels merely start before cudaGraphLaunch
    returns (~30 µs), and all of its span is GPU work. So a step counts as paced when most of its
    span ran under its launch.
    """
    gpu = step_gpu_ms(steps)
    under_launch = (gpu - steps["finalize_ms"].fillna(0) - steps["wait_ms"].fillna(0)).clip(lower=0)
    under_launch = under_launch.clip(upper=steps["launch_ms"].fillna(0))
    return gpu.where(under_launch <= gpu / 2, gpu - under_launch)


def depth2_order(steps: pd.DataFrame) -> pd.DataFrame:
    """The depth-1 step sequence in the order depth 2 runs it: each admission two ticks after its
    finishes.

    The rows that finish at decode step m are known when m commits. At depth 1 that is in tick m, so
    the prefill that admits their replacements is step m+1. At depth 2, tick m+1 launches the next
    step before it commits m, so that prefill can be planned in tick m+2 at the earliest. Depth 1's
    decode, prefill, decode, prefill thus runs as decode, decode, prefill, prefill: admissions bunch
    up, and a prefill's launch may have only another host-bound prefill to hide, not a decode's GPU
    work. Prefills before the first decode (the initial admission) wait for no finish and stay put.
    """
    ordered = steps.sort_values("step")
    decodes: list[int] = []
    # decode index (None: before the first decode) -> the prefills that follow it
    admissions: dict[int | None, list[int]] = {}
    cause: int | None = None
    for i, kind in zip(ordered.index, ordered["kind"], strict=True):
        if kind == "decode":
            decodes.append(i)
            cause = i
        else:
            admissions.setdefault(cause, []).append(i)
    order = list(admissions.pop(None, []))
    ready: list[tuple[int, list]] = []  # (tick it can be planned in, prefills), in order
    for d in decodes:
        while ready and ready[0][0] <= len(order):
            order.extend(ready.pop(0)[1])
        order.append(d)
        if d in admissions:
            ready.append((len(order) + 1, admissions[d]))
    for _, prefills in ready:
        order.extend(prefills)
    return ordered.loc[order]


def pipelined_periods(steps: pd.DataFrame) -> pd.Series:
    """Predicted depth-2 period of each step of a depth-1 table: max(own_t, host_t+1), in depth 2's
    order (depth2_order). The first tick's host work, which nothing overlaps, is not in it (add
    it)."""
    steps = depth2_order(steps)
    host_next = host_tick_ms(steps).shift(-1).fillna(0)
    return pd.Series(
        pipelined_period(own_gpu_ms(steps), host_next).to_numpy(), index=steps["step"].to_numpy()
    )


def finish_events(steps: pd.DataFrame, window: bool = False) -> pd.DataFrame:
    """Per decode step: rows that finished there, rows admitted before the next decode step, next
    batch.

    window: the table is a window of a longer run, so its last decode step is not where everyone
    finished.
    """
    ordered = steps.sort_values("step")
    events, current, admitted = [], None, 0
    for step, kind, rows in zip(
        ordered["step"], ordered["kind"], ordered["batch_size"], strict=True
    ):
        if kind == "prefill":
            admitted += int(rows)
            continue
        if current is not None:
            events.append(
                (*current, max(0, current[1] + admitted - int(rows)), admitted, int(rows))
            )
        current, admitted = (int(step), int(rows)), 0
    if current is not None and not window:
        events.append((*current, current[1], admitted, 0))
    return pd.DataFrame(
        events, columns=["step", "batch_size", "finished", "admitted", "next_batch"]
    )


def _zombie_ms(steps: pd.DataFrame, pipe: pd.Series, cost: StepCost, window: bool):
    """Per finish event, what its zombies cost the pipelined run.

    pipe: by step, the period of one more decode step like it, max(own_t, host_t). Not the step's
    own predicted period: the tick after a finish is often a prefill's, and the zombie step hides
    under it.
    """
    for e in finish_events(steps, window).itertuples():
        replaced = min(e.finished, e.admitted)
        riding = e.finished - replaced
        yield replaced * pipe[e.step] / e.batch_size
        if riding:
            yield cost(e.next_batch + riding) - cost(e.next_batch)


@dataclass(frozen=True)
class WholeRun:
    wall_block_ms: float  # measured depth-1 wall clock
    wall_pipe_ms: float  # predicted depth-2 wall clock
    overhead_ms: float  # time outside the step periods (same at both depths)
    steps_block_ms: float  # Σ measured depth-1 periods
    steps_pipe_ms: float  # Σ predicted depth-2 periods
    zombie_ms: float  # part of steps_pipe_ms spent on zombie rows
    window: bool = False  # the table was a window of the run: walls are the window's steps only

    @property
    def speedup(self) -> float:
        return self.wall_block_ms / self.wall_pipe_ms


def predict_whole_run(
    steps: pd.DataFrame, wall_s: float, cost: StepCost, window: bool = False
) -> WholeRun:
    """Predict depth 2's wall clock from one depth-1 run's per-step table and wall time.

    window: the table holds only some of the run's steps (a trimmed trace). The run's wall clock
    then says nothing about them, so the model predicts the window itself: its steps' periods, no
    overhead.
    """
    steps = steps.sort_values("step")
    if window:  # a window's last step has no period; the run went on past it
        steps = steps[steps["period_ms"].notna()]
    gpu, host = step_gpu_ms(steps), host_tick_ms(steps)
    # The last step has no successor, so no period: it lasts its host and GPU work in series.
    period = steps["period_ms"].fillna(gpu + host)
    pipe = pipelined_periods(steps)
    repeat = pd.Series(
        pipelined_period(own_gpu_ms(steps), host).to_numpy(), index=steps["step"].to_numpy()
    )

    zombie = sum(_zombie_ms(steps, repeat, cost, window))
    wall_block = float(period.sum()) if window else float(wall_s) * 1e3
    overhead = max(0.0, wall_block - float(period.sum()))
    steps_pipe = float(host.iloc[0]) + float(pipe.sum()) + zombie
    return WholeRun(
        wall_block, overhead + steps_pipe, overhead, float(period.sum()), steps_pipe, zombie, window
    )
