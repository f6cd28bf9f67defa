"""The prediction table: the post's model applied to measured runs (and to the post's own numbers).

Inputs are the contract's frames (docs/phases.md): `runs` (one row per run) and `steps` (the
per-step table of every run). Runs that differ only in depth form a pair; repeats of a configuration
pool together. Speedups are in percent, like the post (+7.6 means depth 2 delivers 7.6% more tokens
per second).

Per pair:
- blocking_ms / pipelined_ms: median period of the steady state (profiling.analysis.steady_state,
  the rule `bubblelab analyze` and the report use too).
- predicted_pct: the post's model on those two periods, z from the measured step-cost curve.
- d1_predicted_pct: the same, with T_pipe predicted from the depth-1 table alone, step by step:
  max(GPU span of the step, host time of its tick) (costmodel.model.step_gpu_ms / host_tick_ms).
- wall_predicted_pct: the whole-run model (costmodel.wholerun) from the depth-1 step sequence, the
  mean over the depth-1 repeats (wall_predicted_min / _max: the spread over them). When a
  trace holds only a window of its run (fewer decode steps than the run's `decode_steps`), it
  predicts the window, and wall_observed_pct is the window's measured token rate ratio; otherwise
  both are walls.
- observed_pct: measured throughput ratio, generated_tokens / wall_s; error_pts = observed −
  predicted.
- *_lo / *_hi: 95% bootstrap intervals (steps resampled; repeats resampled for observed when there
  are at least two a side).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd

from bubblelab.costmodel import bootstrap as bs
from bubblelab.costmodel.blog import BLOG_STEP_PARTS, BLOG_TABLE
from bubblelab.costmodel.model import (
    VLLM_BUCKETS,
    StepCost,
    host_tick_ms,
    pipelined_period,
    speedup,
    speedup_bounds,
    step_gpu_ms,
    zombie_tax,
)
from bubblelab.costmodel.wholerun import finish_events, predict_whole_run
from bubblelab.errors import BubblelabError
from bubblelab.profiling.analysis import (
    steady_state,
)  # the project's one steady-state rule (profiling/sql/steady_state.sql)

CONFIG_KEYS = ("model", "preset", "device", "streams", "requests", "output_len_mean")


def pct(ratio):
    """Speedup ratio to percent gained (1.076 -> 7.6); scalars stay scalars."""
    out = (np.asarray(ratio, dtype=float) - 1.0) * 100.0
    return float(out) if out.ndim == 0 else out


def predict_blog() -> pd.DataFrame:
    """The post's table re-predicted by this model, with its z bounds and the post's own
    prediction."""
    rows = []
    for r in BLOG_TABLE.itertuples():
        parts = BLOG_STEP_PARTS[BLOG_STEP_PARTS["gpu"] == r.gpu]
        cost = StepCost.from_points(parts["streams"], parts["forward_ms"] + parts["sampling_ms"])
        z = zombie_tax(r.L, r.streams, cost)
        lo, hi = speedup_bounds(r.blocking_ms, r.pipelined_ms, r.L)
        gpu = float(
            parts.loc[parts["streams"] == r.streams, ["forward_ms", "sampling_ms"]]
            .sum(axis=1)
            .iloc[0]
        )
        predicted = pct(speedup(r.blocking_ms, r.pipelined_ms, z))
        rows.append(
            dict(
                label=f"{r.gpu} · {r.streams} stream{'s' if r.streams > 1 else ''}",
                device=r.gpu,
                streams=r.streams,
                blocking_ms=r.blocking_ms,
                pipelined_ms=r.pipelined_ms,
                L=r.L,
                z=z,
                gpu_ms=gpu,
                host_ms=r.blocking_ms - gpu,
                predicted_pct=predicted,
                predicted_lo=pct(lo),
                predicted_hi=pct(hi),
                published_pct=r.predicted_pct,
                observed_pct=r.observed_pct,
                error_pts=r.observed_pct - predicted,
            )
        )
    return pd.DataFrame(rows)


def run_label(run: pd.Series | dict, depth: bool = True) -> str:
    """ "preset · device · N streams[ · depth d]": how tables and figures name a run or
    configuration. A trace of another engine knows neither streams nor depth: those parts are left
    out."""
    name = next(
        (v for v in (run.get("preset"), run.get("model")) if isinstance(v, str) and v), "model"
    )
    label = f"{name} · {run['device']}"
    streams = known_int(run.get("streams"))
    if streams is not None:
        label += f" · {streams} stream{'s' if streams > 1 else ''}"
    run_depth = known_int(run.get("depth"))
    return f"{label} · depth {run_depth}" if depth and run_depth is not None else label


def known_int(value) -> int | None:
    """An int, or None for a missing value (None, NaN, pd.NA)."""
    return None if value is None or pd.isna(value) else int(value)


def is_window(steps: pd.DataFrame, run) -> bool:
    """Does a run's per-step table hold only part of the run (a trimmed trace)?"""
    total = getattr(run, "decode_steps", None)
    return (
        total is not None
        and pd.notna(total)
        and int((steps["kind"] == "decode").sum()) < int(total)
    )


def token_rate(steps: pd.DataFrame) -> float:
    """Tokens per ms over the steps of a (windowed) table: every row of a step samples a token,
    except a zombie's, and each row that leaves the batch rode its last step as a zombie (at depth
    2; none at 1)."""
    timed = steps[steps["period_ms"].notna()]
    rows = 0.0
    for _, run in timed.groupby("run_id"):
        zombies = (
            finish_events(run, window=True)["finished"].sum() if (run["depth"] == 2).all() else 0
        )
        rows += float(run["batch_size"].sum()) - zombies
    return rows / float(timed["period_ms"].sum())


def pair_runs(runs: pd.DataFrame) -> list[tuple[pd.DataFrame, pd.DataFrame]]:
    """(depth-1 runs, depth-2 runs) per configuration that has both."""
    keys = [k for k in CONFIG_KEYS if k in runs]
    pairs = []
    for _, group in runs.groupby(keys, dropna=False, sort=True):
        d1, d2 = group[group["depth"] == 1], group[group["depth"] == 2]
        if len(d1) and len(d2):
            pairs.append((d1, d2))
    return pairs


def _observed(
    d1: pd.DataFrame,
    d2: pd.DataFrame,
    s1: pd.DataFrame,
    s2: pd.DataFrame,
    n_boot: int,
    rng: np.random.Generator,
) -> tuple[float, float, float]:
    tp1 = (d1["generated_tokens"] / d1["wall_s"]).to_numpy(float)
    tp2 = (d2["generated_tokens"] / d2["wall_s"]).to_numpy(float)
    observed = tp2.mean() / tp1.mean()
    if len(tp1) >= 2 and len(tp2) >= 2:
        boots = bs.resample_means(tp2, n_boot, rng) / bs.resample_means(tp1, n_boot, rng)
    else:  # one run a side: the steps' spread (mean period ratio) carried over to the wall clock
        b1, b2 = (
            bs.resample_means(s1["period_ms"], n_boot, rng),
            bs.resample_means(s2["period_ms"], n_boot, rng),
        )
        point = s1["period_ms"].mean() / s2["period_ms"].mean()
        boots = observed * (b1 / b2) / point
    lo, hi = bs.interval(boots)
    return pct(observed), pct(lo), pct(hi)


def predict_pair(
    d1: pd.DataFrame,
    d2: pd.DataFrame,
    steps: pd.DataFrame,
    *,
    buckets: tuple[int, ...] | None | Literal["auto"] = "auto",
    n_boot: int = 1000,
    seed: int = 0,
) -> dict:
    """One row of the prediction table for a configuration's depth-1 and depth-2 runs.

    buckets: CUDA-graph batch sizes; "auto" = vLLM's on a GPU (the engine's agree at 1, 8 and 32
    streams), none on the CPU, which runs eagerly.
    """
    rng = np.random.default_rng(seed)
    steps1 = steps[steps["run_id"].isin(d1["run_id"])]
    steps2 = steps[steps["run_id"].isin(d2["run_id"])]
    s1, s2 = steady_state(steps1), steady_state(steps2)
    if s1.empty or s2.empty:
        raise BubblelabError(
            f"no steady-state decode steps in runs {', '.join(map(str, [*d1.run_id, *d2.run_id]))}"
        )

    streams = int(d1["streams"].iloc[0])
    if isinstance(buckets, str):  # "auto"
        buckets = None if str(d1["device"].iloc[0]).lower() == "cpu" else VLLM_BUCKETS
    L = float(d1["mean_generated_len"].mean())
    cost = StepCost.from_steps(pd.concat([steps1, steps2]), buckets)
    z = zombie_tax(L, streams, cost)

    t_block, t_pipe = float(s1["period_ms"].median()), float(s2["period_ms"].median())
    boot_block = bs.resample_medians(s1["period_ms"], n_boot, rng)
    boot_pipe = bs.resample_medians(s2["period_ms"], n_boot, rng)
    predicted_lo, predicted_hi = bs.interval(pct(speedup(boot_block, boot_pipe, z)))

    # Depth 1 alone: T_pipe = max(GPU span, host tick), step by step (README.md, "From depth 1
    # alone").
    gpu, host = step_gpu_ms(s1), host_tick_ms(s1)
    pipe_hat = pipelined_period(gpu, host)
    t_pipe_hat = float(pipe_hat.median())
    boot_hat = speedup(boot_block, bs.resample_medians(pipe_hat, n_boot, rng), z)
    d1_lo, d1_hi = bs.interval(pct(boot_hat))

    windows = [
        is_window(steps[steps["run_id"] == r.run_id], r)
        for r in (*d1.itertuples(), *d2.itertuples())
    ]
    window = any(windows)
    whole = [
        predict_whole_run(steps1[steps1["run_id"] == r.run_id], r.wall_s, cost, window)
        for r in d1.itertuples()
    ]
    observed, observed_lo, observed_hi = _observed(d1, d2, s1, s2, n_boot, rng)
    predicted = pct(speedup(t_block, t_pipe, z))
    first = d1.iloc[0]
    return dict(
        label=run_label(first, depth=False),
        device=first["device"],
        preset=first.get("preset"),
        streams=streams,
        blocking_ms=t_block,
        pipelined_ms=t_pipe,
        L=L,
        z=z,
        predicted_pct=predicted,
        predicted_lo=predicted_lo,
        predicted_hi=predicted_hi,
        gpu_ms=float(gpu.median()),
        host_ms=float(host.median()),
        d1_pipelined_ms=t_pipe_hat,
        d1_predicted_pct=pct(speedup(t_block, t_pipe_hat, z)),
        d1_predicted_lo=d1_lo,
        d1_predicted_hi=d1_hi,
        wall_predicted_pct=pct(np.mean([w.speedup for w in whole])),
        wall_scope="window" if window else "run",
        wall_predicted_min=pct(min(w.speedup for w in whole)),
        wall_predicted_max=pct(max(w.speedup for w in whole)),
        wall_observed_pct=pct(token_rate(steps2) / token_rate(steps1)) if window else observed,
        observed_pct=observed,
        observed_lo=observed_lo,
        observed_hi=observed_hi,
        error_pts=observed - predicted,
        runs_block=",".join(map(str, d1["run_id"])),
        runs_pipe=",".join(map(str, d2["run_id"])),
    )


def predict_runs(runs: pd.DataFrame, steps: pd.DataFrame, **kw) -> pd.DataFrame:
    """The prediction table for every configuration measured at both depths.

    A configuration that cannot be predicted (no steady decode steps) is left out and named, with
    the reason, in table.attrs["skipped"], so one broken run does not hide the others.
    """
    rows, skipped = [], []
    for d1, d2 in pair_runs(runs):
        try:
            rows.append(predict_pair(d1, d2, steps, **kw))
        except BubblelabError as e:
            skipped.append(f"{run_label(d1.iloc[0], depth=False)}: {e}")
    table = pd.DataFrame(rows)
    table.attrs["skipped"] = skipped
    return table
