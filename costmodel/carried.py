"""The forecast from depth 1 with the hand-over carried in from other configurations.

At depth 2 the GPU idles a little between two steps queued back to back (`handoff`: ~0.01 ms a
step on one GPU, ~0.017 ms at TP 2 on the machines measured, whatever the model or streams;
docs/h200-costmodel.md, docs/tensor-parallel.md). A depth-1 run never queues a step behind another,
so its pieces cannot show it and the forecast from depth 1 alone takes it as zero: high by up to a
point where steps are short. The hand-over is the engine's and the machine's, not the
configuration's, so it can be measured on one run and carried to another: here, for each
configuration, the median over the *other* configurations' depth-2 runs of the same device and TP
size: the sweep's own, and those of other sweeps on the machine where given (`elsewhere`). The
configuration's own depth-2 runs are never read, so the result is still a forecast of that
configuration; it is shown beside the forecast from depth 1 alone, never instead of it.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import pandas as pd

from .configs import pair_is_window, pair_runs, run_label
from .costs import own_handoff_ms
from .observed import pair_repeats, pairs_interval
from .predict import _median_pair, _whole_runs
from .tensor_parallel import tp_steps

COLUMNS = ("carried_handoff_ms", "wall_d1h_predicted_pct", "wall_d1h_error_pts",
           "wall_d1h_error_lo", "wall_d1h_error_hi")  # fmt: skip


def _machine(d1: pd.DataFrame) -> tuple[str, int]:
    first = d1.iloc[0]
    return (str(first.get("device")), int(first.get("tensor_parallel", 1) or 1))


def _configs(runs: pd.DataFrame) -> list[tuple[str, pd.DataFrame, pd.DataFrame]]:
    """(label, depth-1 runs, depth-2 runs) of every configuration measured at both depths."""
    return [(run_label(d1.iloc[0], depth=False), d1, d2) for d1, d2 in pair_runs(runs)]


def handoffs(
    runs: pd.DataFrame, steps: pd.DataFrame, ranks: pd.DataFrame | None = None
) -> list[tuple[str, tuple[str, int], float]]:
    """(label, (device, TP size), hand-over ms) of every configuration measured at both depths."""
    return _handoffs(_configs(runs), tp_steps(steps, ranks))


def _handoffs(configs, steps: pd.DataFrame) -> list[tuple[str, tuple[str, int], float]]:
    return [(label, _machine(d1), own_handoff_ms(d2, steps)) for label, d1, d2 in configs]


def with_carried_handoff(
    table: pd.DataFrame,
    runs: pd.DataFrame,
    steps: pd.DataFrame,
    requests: pd.DataFrame | None = None,
    ranks: pd.DataFrame | None = None,
    elsewhere: list[tuple[tuple[str, int], float]] | None = None,
    n_boot: int = 1000,
    seed: int = 0,
) -> pd.DataFrame:
    """predict_runs' table with COLUMNS added: the hand-over carried in (NaN where no other
    configuration of the same machine ran depth 2), the forecast from depth 1 with it (median
    pair, as wall_d1_predicted_pct) and observed − it, with its 95% interval over resampled pairs
    (as wall_d1_error_lo / _hi: each pair's forecast reads that pair's depth-1 run, so a host
    whose speed moves the speedup from pair to pair moves the forecast with it). elsewhere:
    (machine, hand-over) of configurations in other sweeps (handoffs), pooled with this sweep's
    others."""
    steps = tp_steps(steps, ranks)
    rng = np.random.default_rng(seed)
    requests = requests if requests is not None else pd.DataFrame()
    configs = _configs(runs)
    own = _handoffs(configs, steps)
    out: dict[str, dict[str, float]] = {c: {} for c in COLUMNS}
    for label, d1, d2 in configs:
        here = [(m, ms) for o, m, ms in own if o != label]
        others = [ms for m, ms in [*here, *(elsewhere or [])] if m == _machine(d1)]
        if not others:
            continue
        carried = float(np.median(others))
        pairs = pair_repeats(d1, d2)
        window = pair_is_window(d1, d2, steps)
        whole = _whole_runs(pairs, steps, requests, window, carried_handoff_ms=carried)
        tokens = np.array([1.0 if window else float(r1["generated_tokens"]) for r1, _ in pairs])
        tok2 = np.array([w.rate_scale if window else float(r2["generated_tokens"])
                         for w, (_, r2) in zip(whole, pairs, strict=True)])  # fmt: skip
        block = np.array([w.wall_block_ms for w in whole])
        pipe = np.array([w.wall_pipe_ms for w in whole])
        forecast = np.array([w.from_d1_carried_ms for w in whole], dtype=float)
        arrays = dict(tokens=tokens, block=block, tok2=tok2, pipe=pipe, forecast=forecast)
        lo, hi = pairs_interval(partial(_miss_pts, **arrays), len(pairs), n_boot, rng)
        out["carried_handoff_ms"][label] = carried
        out["wall_d1h_predicted_pct"][label] = (
            _median_pair(tokens, block, tokens, forecast) - 1
        ) * 100
        out["wall_d1h_error_lo"][label], out["wall_d1h_error_hi"][label] = lo, hi
    table = table.copy()
    for column in (*COLUMNS[:2], *COLUMNS[3:]):
        table[column] = table["label"].map(out[column]).astype(float)
    table["wall_d1h_error_pts"] = table["wall_observed_pct"] - table["wall_d1h_predicted_pct"]
    return table


def _miss_pts(idx: np.ndarray, tokens, block, tok2, pipe, forecast) -> float:
    """Observed − carried forecast (points) over the pairs `idx`, each a median pair."""
    measured = _median_pair(tokens[idx], block[idx], tok2[idx], pipe[idx])
    return (measured - _median_pair(tokens[idx], block[idx], tokens[idx], forecast[idx])) * 100
