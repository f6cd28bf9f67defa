"""The prediction table: the post's model applied to measured runs (and to the post's own numbers).

Inputs are the contract's frames (docs/phases.md): `runs` (one row per run), `steps` (the per-step
table of every run) and, when recorded, `requests`. Runs that differ only in depth form a
configuration; its depth-1 and depth-2 runs pair up by repeat (costmodel.observed). Runs under a
profiler are left out when unprofiled runs are there: the model is fed what the engine does without
one. Speedups are in percent, like the post (+7.6 means depth 2 delivers 7.6% more tokens per
second).

Per configuration, the HEADLINE first: what a user can act on before running depth 2 and what was
measured, each with its interval:
- wall_d1_predicted_pct (_lo / _hi): the forecast, the whole-run model from the depth-1 run alone
  (its schedule replayed from the requests, costed with depth 1's pieces); intervals resample pairs.
- observed_pct: depth 2's tokens/s over depth 1's, the median pair (costmodel.observed);
  observed_lo / _hi its 95% interval (widened to each worker process's own median where the pairs
  came from several); observed_known: that interval is within ±1 point. pairs: how many.
  wall_cv_d1_pct / _d2_pct: the spread of the runs (wall per token) at each depth, the workload's
  included when repeats run different requests; step_cv_d1_pct / _d2_pct (after the headline: they
  read depth 2's steps) the spread of each run's median steady step, the noise alone.
- wall_d1_error_pts (_lo / _hi): observed − forecast.
  The forecast costs in the GPU's idle between two queued steps as the depth-1 run probed it before
  its timed region (engine.handoff_probe; runs without a probe: none). handoff_probe_ms is that
  probe, handoff_probe_d2_ms the depth-2 runs' own, handoff_d2_ms what depth 2's steps measured:
  where the probe and the steps disagree, term_handoff_pts says by how much it moved the forecast.
The rest explains the measured speedup and reads the depth-2 run; it is no forecast:
- blocking_ms / pipelined_ms: median period of the steady state (core.steady.steady_state).
- predicted_pct: the post's model on those two periods, z from the measured step-cost curve (per
  step; *_lo / *_hi from resampling steps); error_pts = observed − predicted.
- d1_predicted_pct: the same with T_pipe predicted from the depth-1 table alone (z still from
  both runs' step costs).
- wall_predicted_pct: the whole-run model (costmodel.wholerun): the schedule depth 2 ran, costed
  with both runs' measured pieces; wall_error_pts = observed − it, with a 95% interval over pairs.
  term_<name>_pts: what each measured depth-2 piece moves the forecast by, on the way to it.
- arrivals, arrival_wait_d1_ms, wall_d1_caveat: a workload whose requests arrive over time
  (requests' arrival_s) is replayed on a clock, and the row says what that leaves uncertain
  (arrival_columns); so does a depth 1 whose GPU, kept busy, would reach its power limit
  (costmodel.power: power_full_duty_w, given power_limit_w).
- A trimmed trace (fewer decode steps than its run's `decode_steps`) is modelled as a window: the
  walls are its periods and wall_observed_pct its measured token-rate ratio.
- A tensor-parallel configuration (runs' tensor_parallel > 1) is rank 0's runs, each step's GPU time
  taken across the ranks when `ranks` (results.json's per-rank table) covers them
  (costmodel.tensor_parallel): gpu_from says whose pieces were used, the other TP columns what they
  measured.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd

from ..core.errors import BubblelabError
from ..core.steady import steady_state  # the project's one steady-state rule
from . import bootstrap as bs
from .configs import (
    limits_of,
    pair_is_window,
    pair_runs,
    run_label,
)
from .costs import handoff_columns, probed_handoff_ms
from .model import (
    VLLM_BUCKETS,
    StepCost,
    host_tick_ms,
    pct,
    pipelined_period,
    speedup,
    step_gpu_ms,
    zombie_tax,
)
from .observed import (
    cv_pct,
    median_of_pairs,
    pair_ratios,
    pair_repeats,
    pairs_interval,
    pairs_known,
    pooled,
    pooled_over_pairs,
    wall_cv_pct,
)
from .power import with_power
from .schedule import requests_from_table
from .tensor_parallel import tp_columns, tp_steps
from .wholerun import TERMS, WholeRun, predict_pair_wall

# What a table shows first: the forecast from the depth-1 run alone and the observed speedup, each
# with its interval, and the miss between them. Nothing here reads a depth-2 run's pieces
# (tests/test_costmodel_headline.py perturbs them). The rest of a row explains the measurement.
HEADLINE = (
    "label", "wall_d1_predicted_pct", "wall_d1_predicted_lo", "wall_d1_predicted_hi",
    "wall_d1_predicted_known", "observed_pct", "observed_lo", "observed_hi", "observed_known",
    "pairs", "wall_d1_error_pts", "wall_d1_error_lo", "wall_d1_error_hi", "wall_d1_error_known",
    "wall_cv_d1_pct", "wall_cv_d2_pct",
)  # fmt: skip
Statistic = Literal["median", "pooled"]


def _whole_runs(pairs, steps, requests, window, carried_handoff_ms=None) -> list[WholeRun]:
    out = []
    for r1, r2 in pairs:
        mine = requests[requests["run_id"] == r1["run_id"]] if len(requests) else requests
        out.append(
            predict_pair_wall(
                steps[steps["run_id"] == r1["run_id"]],
                r1["wall_s"],
                steps[steps["run_id"] == r2["run_id"]],
                r2["wall_s"],
                requests=requests_from_table(mine) if len(mine) else None,
                streams=int(r1["streams"]),
                limits=limits_of(r1),
                window=window,
                carried_handoff_ms=carried_handoff_ms,
                probe_handoff_ms=probed_handoff_ms(r1),
            )
        )
    return out


def _wall_columns(pairs, whole: list[WholeRun], window: bool, statistic: Statistic, n_boot, rng):
    """Observed and whole-run predicted speedups over the pairs, with intervals over pairs.

    observed_pct is always the runs' tokens over wall clock: the median pair's (costmodel.observed),
    or with statistic="pooled" issue #16's pooled totals. The whole-run model predicts what its
    tables hold: the runs, or for trimmed traces their windows (wall_observed_pct: their token
    rates); its speedups are taken over the pairs the same way, their intervals by resampling
    pairs."""
    n = len(whole)
    run_tok1 = np.array([float(r1["generated_tokens"]) for r1, _ in pairs])
    run_tok2 = np.array([float(r2["generated_tokens"]) for _, r2 in pairs])
    run_wall1 = np.array([float(r1["wall_s"]) for r1, _ in pairs])
    run_wall2 = np.array([float(r2["wall_s"]) for _, r2 in pairs])
    # The model's tables: whole runs (each run's tokens) or windows (depth 2's rows over depth 1's).
    tok1 = np.ones(n) if window else run_tok1
    tok2 = np.array([w.rate_scale for w in whole]) if window else run_tok2
    wall1 = np.array([w.wall_block_ms for w in whole])
    walls = {
        "measured": (tok2, np.array([w.wall_pipe_ms for w in whole])),
        "model": (tok2, np.array([w.model_ms for w in whole])),
        "d1": (tok1, np.array([w.from_d1_ms for w in whole])),  # depth 1's own steps, replayed
    }
    over_pairs = pooled if statistic == "pooled" else _median_pair

    def speedup(name, idx):
        t2, w2 = walls[name]
        return pct(over_pairs(tok1[idx], wall1[idx], t2[idx], w2[idx]))

    if statistic == "pooled":  # its bootstrap draws first, as when the held-out set was frozen
        observed = pooled_over_pairs(run_tok1, run_wall1, run_tok2, run_wall2, n_boot, rng)
    else:
        processes = [r1.get("process") for r1, _ in pairs]  # the worker that made each pair
        observed = median_of_pairs(pair_ratios(run_tok1, run_wall1, run_tok2, run_wall2), processes)
    every = np.arange(n)
    target = speedup("measured", every)
    out = dict(
        **observed.columns(),
        wall_cv_d1_pct=wall_cv_pct(run_tok1, run_wall1),
        wall_cv_d2_pct=wall_cv_pct(run_tok2, run_wall2),
        wall_scope="window" if window else "run",
        wall_observed_pct=target,
    )
    for name, prefix in (("model", "wall"), ("d1", "wall_d1")):
        predicted = speedup(name, every)

        def error(idx: np.ndarray, model: str = name) -> float:
            return speedup("measured", idx) - speedup(model, idx)

        err_lo, err_hi = pairs_interval(error, n, n_boot, rng)
        out |= {
            f"{prefix}_predicted_pct": predicted,
            f"{prefix}_error_pts": target - predicted,
            f"{prefix}_error_lo": err_lo,
            f"{prefix}_error_hi": err_hi,
        }
    # The forecast's own interval (drawn last: the frozen columns above keep their draws).
    d1_lo, d1_hi = pairs_interval(lambda idx: speedup("d1", idx), n, n_boot, rng)
    per_pair = [pct(w.predicted) for w in whole]
    miss_lo, miss_hi = out["wall_d1_error_lo"], out["wall_d1_error_hi"]
    out |= dict(
        wall_d1_predicted_lo=d1_lo,
        wall_d1_predicted_hi=d1_hi,
        wall_d1_predicted_known=pairs_known(d1_lo, d1_hi, n, statistic),
        wall_d1_error_known=pairs_known(miss_lo, miss_hi, n, statistic),
        wall_predicted_min=min(per_pair),
        wall_predicted_max=max(per_pair),
        replayed=all(w.replayed for w in whole),
        schedule_match=float(np.mean([w.schedule_match for w in whole])),
        **{f"term_{t}_pts": float(np.mean([w.terms_pts[t] for w in whole])) for t in TERMS},
        **arrival_columns(whole),
    )
    return out


def arrival_columns(whole: list) -> dict:
    """arrivals: the requests arrived over time, so the forecast replayed them on a clock (depth
    1's step costs); arrival_wait_d1_ms: how long depth 1 emptied mid-run waiting for one (its
    replay, mean over pairs); wall_d1_caveat: what of the forecast depth 1 alone cannot pin down."""
    arrivals = any(w.arrivals for w in whole)
    waited = float(np.mean([w.waited_ms for w in whole]))
    caveats = []
    if arrivals:
        caveats.append(
            "arrivals: the replay admits each request once it has arrived, timed by depth 1's "
            "step costs; an arrival within a tick of a step boundary may go either way, so the "
            "schedule is not reproduced step for step (schedule_match; term_replay_pts is its cost)"
        )
    if waited > 1e-6:  # float noise aside
        caveats.append(
            f"depth 1 emptied mid-run for {waited:.1f} ms waiting for arrivals: its step periods "
            "hold those waits, so its step costs, and this forecast, are not clean"
        )
    return dict(arrivals=arrivals, arrival_wait_d1_ms=waited, wall_d1_caveat="; ".join(caveats))


def _median_pair(tokens1, wall1, tokens2, wall2) -> float:
    return float(np.median(pair_ratios(tokens1, wall1, tokens2, wall2)))


def predict_pair(
    d1: pd.DataFrame,
    d2: pd.DataFrame,
    steps: pd.DataFrame,
    *,
    requests: pd.DataFrame | None = None,
    buckets: tuple[int, ...] | None | Literal["auto"] = "auto",
    n_boot: int = 1000,
    seed: int = 0,
    statistic: Statistic = "median",
    power_limit_w: float | None = None,
) -> dict:
    """One row of the prediction table for a configuration's depth-1 and depth-2 runs, the
    HEADLINE columns first. power_limit_w: the GPU's (costmodel.power.power_limit_w).

    buckets: CUDA-graph batch sizes; "auto" = vLLM's on a GPU (the engine's agree at 1, 8 and 32
    streams), none on the CPU, which runs eagerly. statistic: how pairs combine (_wall_columns).
    """
    rng = np.random.default_rng(seed)
    steps1 = steps[steps["run_id"].isin(d1["run_id"])]
    steps2 = steps[steps["run_id"].isin(d2["run_id"])]
    s1, s2 = steady_state(steps1), steady_state(steps2)
    if s1.empty or s2.empty:
        raise BubblelabError(
            f"no steady-state decode steps in runs {', '.join(map(str, [*d1.run_id, *d2.run_id]))}"
        )
    pairs = pair_repeats(d1, d2)
    if not pairs:
        raise BubblelabError("no repeat ran at both depths")

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

    window = pair_is_window(d1, d2, steps)
    requests = requests if requests is not None else pd.DataFrame()
    whole = _whole_runs(pairs, steps, requests, window)
    walls = _wall_columns(pairs, whole, window, statistic, n_boot, rng)
    walls = with_power(walls, d1, steps1, power_limit_w)
    predicted = pct(speedup(t_block, t_pipe, z))
    first = d1.iloc[0]
    row = dict(
        label=run_label(first, depth=False),
        **walls,
        model=first.get("model"),
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
        error_pts=walls["observed_pct"] - predicted,
        step_cv_d1_pct=cv_pct(s1.groupby("run_id")["period_ms"].median()),
        step_cv_d2_pct=cv_pct(s2.groupby("run_id")["period_ms"].median()),
        **handoff_columns(d1, d2, steps),
        runs_block=",".join(str(r1["run_id"]) for r1, _ in pairs),
        runs_pipe=",".join(str(r2["run_id"]) for _, r2 in pairs),
    )
    return {**{k: row[k] for k in HEADLINE}, **row}


def predict_runs(
    runs: pd.DataFrame,
    steps: pd.DataFrame,
    requests: pd.DataFrame | None = None,
    ranks: pd.DataFrame | None = None,
    **kw,
) -> pd.DataFrame:
    """The prediction table for every configuration measured at both depths.

    ranks: every rank's steps of the tensor-parallel runs (results.json's `ranks`), whose GPU
    pieces the model then takes across ranks (costmodel.tensor_parallel). A configuration that
    cannot be predicted (no steady decode steps) is left out and named, with the reason, in
    table.attrs["skipped"], so one broken run does not hide the others.
    """
    rows, skipped = [], []
    steps = tp_steps(steps, ranks)
    for d1, d2 in pair_runs(runs):
        try:
            row = predict_pair(d1, d2, steps, requests=requests, **kw)
            rows.append(row | tp_columns(d1, d2, ranks))
        except BubblelabError as e:
            skipped.append(f"{run_label(d1.iloc[0], depth=False)}: {e}")
    table = pd.DataFrame(rows)
    table.attrs["skipped"] = skipped
    return table
