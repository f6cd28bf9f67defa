"""costmodel.foreign on per-step tables built by hand: the whole-run figure sums the trace's own
steps (as a measured wall clock does), the steady one takes medians; no zombies, no tax."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from bubblelab.core.errors import BubblelabError, OptionError
from bubblelab.costmodel.foreign import pipelining_gain
from bubblelab.runs.analysis import replayed_extra_steps
from bubblelab.runs.workload import WorkloadSpec


def foreign_steps(
    gpu: list[float], host: list[float], kinds: list[str] | None = None
) -> pd.DataFrame:
    """A foreign per-step table of a blocking loop: each period is the step's GPU work, then the
    host's work (which launches the next step) while the GPU idles; the engine waits in a sync for
    the whole GPU work. The last step has no period."""
    n = len(gpu)
    period = [g + h for g, h in zip(gpu, host, strict=True)]
    return pd.DataFrame({
        "run_id": "r", "step": range(n), "kind": kinds or ["decode"] * n, "batch_size": np.nan,
        "busy_ms": gpu, "forward_ms": gpu, "sampling_ms": np.nan, "kernel_gap_ms": 0.0,
        "bubble_ms": host, "wait_ms": gpu, "period_ms": period[:-1] + [np.nan],
    })  # fmt: skip


def test_the_whole_run_sums_every_step_where_the_steady_step_takes_medians():
    gpu = [1.0] * 40
    host = [0.3] * 40
    host[20] = 3.0  # one slow host tick: in the wall clock, not in a median
    gain = pipelining_gain(foreign_steps(gpu, host), output_len=64, zombies=False)
    whole = gain["whole_run"]
    timed = slice(0, 39)  # the last step has no period
    block = sum(g + h for g, h in zip(gpu[timed], host[timed], strict=True))
    pipe = sum(max(g, h) for g, h in zip(gpu[timed], host[timed], strict=True))
    assert whole["wall_block_ms"] == pytest.approx(block)
    assert whole["wall_pipe_ms"] == pytest.approx(pipe)
    assert whole["speedup_pct"] == pytest.approx((block / pipe - 1) * 100, abs=1e-3)
    assert gain["speedup_pct"] == pytest.approx(30.0, abs=1e-3)  # 1.3 / 1.0, the median step
    assert whole["speedup_pct"] > gain["speedup_pct"]  # the slow tick hides under depth 2 too
    lo, hi = whole["interval_pct"]
    assert lo <= whole["speedup_pct"] <= hi
    assert whole["steps"] == 39 and whole["prefill_steps"] == 0


def test_no_zombies_drops_the_tax_from_both_figures_and_says_so():
    steps = foreign_steps([1.0] * 30, [0.5] * 30)
    taxed = pipelining_gain(steps, output_len=50)
    free = pipelining_gain(steps, output_len=50, zombies=False)
    assert taxed["z"] == pytest.approx(0.02) and free["z"] == 0.0
    assert free["speedup_pct"] == pytest.approx(50.0, abs=1e-3)
    assert taxed["speedup_pct"] == pytest.approx((1.5 * 0.98 - 1) * 100, abs=1e-3)
    assert free["whole_run"]["speedup_pct"] == pytest.approx(50.0, abs=1e-3)
    assert taxed["whole_run"]["speedup_pct"] == pytest.approx(47.0, abs=1e-3)
    assert free["interval_pct"] == pytest.approx([50.0, 50.0], abs=1e-3)  # no z span, no noise
    assert taxed["interval_pct"][0] < taxed["interval_pct"][1]  # z from 1/L to 0
    assert any(a.startswith("z = 0: no zombies") for a in free["assumptions"])


def test_the_engines_step_time_takes_the_profilers_host_time_off_every_step():
    """With --step-ms each step loses what the profiler added (the traced median period less the
    given step time) from its host work and its period, never below its GPU work."""
    gpu, host = [1.0] * 30, [0.5] * 30
    host[10] = 0.1  # a step whose whole host work is less than the profiler's share
    given = pipelining_gain(foreign_steps(gpu, host), output_len=64, zombies=False, step_ms=1.2)
    whole = given["whole_run"]
    added = 0.3  # 1.5 traced, 1.2 given
    block = sum(max(g + h - added, g) for g, h in zip(gpu[:29], host[:29], strict=True))
    assert whole["wall_block_ms"] == pytest.approx(block)
    assert whole["wall_pipe_ms"] == pytest.approx(29.0)  # the host's 0.2 ms hides under 1 ms
    assert given["speedup_pct"] == pytest.approx(20.0, abs=1e-3)


def test_prefill_steps_count_in_the_whole_run():
    kinds = ["prefill"] + ["decode"] * 20 + ["prefill"] + ["decode"] * 20
    gpu = [4.0 if k == "prefill" else 1.0 for k in kinds]
    host = [0.8 if k == "prefill" else 0.2 for k in kinds]
    gain = pipelining_gain(foreign_steps(gpu, host, kinds), output_len=21, zombies=False)
    whole = gain["whole_run"]
    assert whole["prefill_steps"] == 2 and whole["steps"] == len(kinds) - 1
    assert gain["speedup_pct"] == pytest.approx(20.0, abs=1e-3)  # decode steps only
    assert whole["speedup_pct"] == pytest.approx(20.0, abs=1e-3)  # prefills gain 20% too
    assert "2 of them prefill-like" in whole["line"]


def test_the_engines_mean_step_sets_the_whole_runs_profiler_time():
    """--mean-step-ms: the traced mean period's excess over the engine's own mean step comes off
    every step (a mix of batch sizes moves a mean and a median apart; the wall clock is a mean)."""
    gpu = [1.0] * 20 + [2.0] * 20
    host = [0.5] * 40
    steps = foreign_steps(gpu, host)
    traced_mean = float(steps["period_ms"].mean())
    gain = pipelining_gain(steps, output_len=64, zombies=False, mean_step_ms=traced_mean - 0.3)
    whole = gain["whole_run"]
    assert (
        whole["profiler_ms"] == pytest.approx(0.3)
        and whole["profiler_source"] == "mean step (given)"
    )
    assert whole["wall_block_ms"] == pytest.approx((traced_mean - 0.3) * 39)
    assert gain["t_block_source"] == "trace"  # the steady figure keeps the trace's step
    assert "engine's own mean step" in whole["line"]


def test_an_engine_slower_than_its_trace_gets_the_difference_as_host_work():
    """The engine's own step can be the slower one: its host ran slower than in the traced run
    (on the GPU machines the host's speed moves between runs minutes apart). The GPU's work is the
    trace's, so the difference is host time. It lengthens every step's period and host work, and
    the figure follows the given step instead of staying at the trace's."""
    gpu, host = [1.0] * 40, [0.3] * 40
    steps = foreign_steps(gpu, host)  # periods of 1.3 ms
    gain = pipelining_gain(steps, output_len=64, zombies=False, mean_step_ms=1.5)
    whole = gain["whole_run"]
    assert whole["profiler_ms"] == pytest.approx(-0.2)
    assert whole["wall_block_ms"] == pytest.approx(1.5 * 39)
    assert whole["wall_pipe_ms"] == pytest.approx(1.0 * 39)  # the host's 0.5 ms still hides
    assert whole["speedup_pct"] == pytest.approx(50.0, abs=1e-3)
    assert "0.200 ms longer" in whole["line"]
    # Slower still, the host's work outlasts the GPU's and sets the pipelined step.
    slow = pipelining_gain(steps, output_len=64, zombies=False, mean_step_ms=2.5)["whole_run"]
    assert slow["wall_pipe_ms"] == pytest.approx(1.5 * 39)  # 0.3 + 1.2 of host a step
    # The steady figure with --step-ms the same way: T_block the given, the host's work longer.
    steady = pipelining_gain(steps, output_len=64, zombies=False, step_ms=2.5)
    assert steady["t_block_ms"] == pytest.approx(2.5) and steady["t_pipe_ms"] == pytest.approx(1.5)
    assert any("did not spend" in a for a in steady["assumptions"])


def test_a_mean_step_the_gpu_alone_exceeds_is_refused():
    steps = foreign_steps([1.0] * 30, [0.5] * 30)
    with pytest.raises(BubblelabError, match="shorter than the GPU's mean work"):
        pipelining_gain(steps, output_len=64, mean_step_ms=0.5)


def test_depth_2s_extra_steps_lengthen_the_pipelined_sum():
    steps = foreign_steps([1.0] * 30, [0.5] * 30)
    plain = pipelining_gain(steps, output_len=64, zombies=False)["whole_run"]
    longer = pipelining_gain(steps, output_len=64, zombies=False, extra_steps=0.02)["whole_run"]
    assert longer["wall_pipe_ms"] == pytest.approx(plain["wall_pipe_ms"] * 1.02)
    assert longer["wall_block_ms"] == plain["wall_block_ms"]
    assert longer["speedup_pct"] == pytest.approx((1.5 / 1.02 - 1) * 100, abs=1e-3)
    assert "2.00% more steps" in longer["line"] and "give the workload's shape" in plain["line"]
    with pytest.raises(OptionError):
        pipelining_gain(steps, output_len=64, extra_steps=2.0)


def test_the_replayed_extra_steps_grow_with_the_streams():
    """Depth 2 admits a finish's replacement a tick later: nothing to merge at one stream, more
    steps at many (measured on an H200: 0.4%, 1.0-1.1% and 1.7-1.75% at 1, 32 and 128 streams)."""
    one = replayed_extra_steps(WorkloadSpec(streams=1, output_len_mean=64))
    many = replayed_extra_steps(WorkloadSpec(streams=128, output_len_mean=64))
    assert one == 0.0 and 0.005 < many < 0.03
    with pytest.raises(OptionError, match="closed loop"):
        replayed_extra_steps(WorkloadSpec(streams=4, arrival_rate=10.0))
