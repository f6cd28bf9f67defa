"""What a configuration is: the run keys that make one, how tables name it, and which runs pair up
(depth 1 with depth 2) for the prediction table (costmodel.predict) and its siblings."""

from __future__ import annotations

import pandas as pd

from ..core.words import counted
from .schedule import Limits

# arrival_rate: Poisson arrivals a second, None for a closed loop (runs record it since issue #25:
# two sweeps that differ only in the rate are two configurations, never one)
CONFIG_KEYS = (
    "model", "preset", "device", "tensor_parallel", "streams", "requests", "output_len_mean",
    "prompt_len", "constraint", "constrained_share", "arrival_rate", "profiled",
)  # fmt: skip
LIMITS = ("max_num_seqs", "max_num_batched_tokens", "max_model_len")


def run_label(run: pd.Series | dict, depth: bool = True) -> str:
    """ "preset · device[ · TP n] · N streams[ · R req/s][ · depth d]": how tables and figures name
    a run or configuration (TP n: split over n GPUs, when n > 1; R: Poisson arrivals a second).
    A trace of another engine knows neither streams nor depth: those parts are left out."""
    name = next(
        (v for v in (run.get("preset"), run.get("model")) if isinstance(v, str) and v), "model"
    )
    label = f"{name} · {run['device']}"
    tensor_parallel = known_int(run.get("tensor_parallel"))
    if tensor_parallel is not None and tensor_parallel > 1:
        label += f" · TP {tensor_parallel}"
    streams = known_int(run.get("streams"))
    if streams is not None:
        label += f" · {counted(streams, 'stream')}"
    rate = run.get("arrival_rate")
    if rate is not None and not pd.isna(rate):
        label += f" · {rate:g} req/s"
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


def pair_is_window(d1: pd.DataFrame, d2: pd.DataFrame, steps: pd.DataFrame) -> bool:
    """Does any run of a configuration hold only part of its steps (is_window)?"""
    return any(
        is_window(steps[steps["run_id"] == r.run_id], r)
        for r in (*d1.itertuples(), *d2.itertuples())
    )


def runs_modelled(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs a table models: profiled ones only when no unprofiled run is there; a
    tensor-parallel run as its rank 0's (a catalog's rank r > 0 runs, runs.rank, are the same
    run's workers, not runs of their own)."""
    if "rank" in runs:
        runs = runs[~(pd.to_numeric(runs["rank"], errors="coerce").fillna(0) > 0)]
    if "profiled" in runs and runs["profiled"].eq(False).any():
        runs = runs[runs["profiled"].eq(False)]
    return runs


def pair_runs(runs: pd.DataFrame) -> list[tuple[pd.DataFrame, pd.DataFrame]]:
    """(depth-1 runs, depth-2 runs) per configuration that has both (of runs_modelled)."""
    runs = runs_modelled(runs)
    keys = [k for k in CONFIG_KEYS if k in runs]
    pairs = []
    for _, group in runs.groupby(keys, dropna=False, sort=True):
        d1, d2 = group[group["depth"] == 1], group[group["depth"] == 2]
        if len(d1) and len(d2):
            pairs.append((d1, d2))
    return pairs


def limits_of(run: pd.Series) -> Limits | None:
    values = [run.get(k) for k in LIMITS]
    if any(v is None or pd.isna(v) for v in values):
        return None
    return Limits(*(int(v) for v in values))
