"""The cost model at TP 2 on hand-made per-rank tables with a known hand-off lag and straggler: the
GPU piece is taken across ranks, and what the model used is said (costmodel.tensor_parallel)."""

from __future__ import annotations

import pandas as pd
import pytest

from bubblelab.costmodel.predict import predict_runs
from bubblelab.costmodel.tensor_parallel import tp_columns, tp_comparison, tp_pieces, tp_steps

STEPS = 30
MS = 1_000_000  # ns
# depth: (period, rank 0's forward span, its wait in commit, the worker's lag behind rank 0)
SHAPES = {1: (1.0, 0.60, 0.60, 0.10), 2: (0.70, 0.52, 0.30, 0.0)}
SAMPLING, STRAGGLER = 0.05, 0.02  # every rank's sampling; the worker's forward ends this much later


def tables() -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    runs, steps, rank_rows = [], [], []
    for depth, (period, forward, wait, lag) in SHAPES.items():
        run_id = f"d{depth}"
        runs.append(dict(run_id=run_id, model="m", preset="m", device="cpu", depth=depth,
                         streams=1, repeat=0, mean_generated_len=STEPS, requests=1,
                         generated_tokens=STEPS, wall_s=STEPS * period / 1e3,
                         decode_steps=STEPS - 1, tensor_parallel=2, rank=0))  # fmt: skip
        for k in range(STEPS):
            start = k * period * MS
            row = dict(run_id=run_id, step=k, kind="prefill" if k == 0 else "decode",
                       depth=depth, batch_size=1, forward_ms=forward, sampling_ms=SAMPLING,
                       bubble_ms=period - forward - SAMPLING, kernel_gap_ms=0.0,
                       period_ms=period, plan_ms=0.05, launch_ms=0.1, finalize_ms=0.05,
                       commit_ms=wait + 0.05, wait_ms=wait, gpu_start_ns=start,
                       gpu_end_ns=start + (forward + SAMPLING) * MS)  # fmt: skip
            steps.append(row)
            end0 = start + forward * MS
            for rank, begin, end, handoff, host in (
                (0, start, end0, 0.02, (0.1, 0.05)),
                (1, start + lag * MS, end0 + STRAGGLER * MS, None, (0.08, 0.04)),
            ):
                rank_rows.append(
                    {
                        **row,
                        "rank": rank,
                        "rank_run_id": f"{run_id}-rank{rank}",
                        "forward_ms": (end - begin) / MS,
                        "forward_start": begin,
                        "forward_end": end,
                        "sampling_end": end + SAMPLING * MS,
                        "handoff_ms": handoff,
                        "launch_ms": host[0],
                        "finalize_ms": host[1],
                    }  # fmt: skip
                )
    steps_df = pd.DataFrame(steps)
    steps_df.loc[steps_df["step"] == STEPS - 1, "period_ms"] = None  # the last step has no period
    ranks = pd.DataFrame(rank_rows)
    ranks.loc[ranks["step"] == STEPS - 1, "period_ms"] = None
    return pd.DataFrame(runs), steps_df, ranks


def test_the_gpu_piece_runs_from_the_last_rank_to_begin_to_the_last_to_end():
    runs, steps, ranks = tables()
    across = tp_steps(steps, ranks).set_index(["run_id", "step"])
    d1 = across.loc["d1"]
    # depth 1: rank 0's forward [0, 0.60) holds the worker's 0.10 lag; the worker ends 0.02 later
    assert d1["forward_ms"].round(9).unique().tolist() == [0.52]
    assert d1["rank0_forward_ms"].unique().tolist() == [0.60]
    assert d1["sampling_ms"].unique().tolist() == [SAMPLING]
    # steps the rank tables do not cover keep rank 0's own
    partial = tp_steps(steps, ranks[ranks["step"] != 3]).set_index(["run_id", "step"])
    assert partial.loc[("d1", 3), "forward_ms"] == 0.60
    pieces = tp_pieces(ranks).set_index("run_id").round(9)
    assert pieces.loc["d1"].to_dict() == {
        "ranks": 2, "rank0_gpu_ms": 0.65, "tp_gpu_ms": 0.57, "straggler_extra_ms": 0.02,
        "handoff_lag_ms": 0.1, "handoff_host_ms": 0.02, "rank0_host_ms": 0.15,
        "worker_host_ms": 0.12,
    }  # fmt: skip
    assert pieces.loc["d2", "handoff_lag_ms"] == 0 and pieces.loc["d2", "tp_gpu_ms"] == 0.59


def test_the_prediction_from_depth_1_uses_the_gpu_piece_across_ranks():
    runs, steps, ranks = tables()
    row = predict_runs(runs, steps, ranks=ranks, n_boot=20).iloc[0]
    # T_pipe from depth 1 = max(GPU, host tick = period - wait = 0.40): the GPU piece 0.57 binds;
    # rank 0's own span would say 0.65, its hand-off lag counted as GPU work depth 2 must still do
    assert row["d1_pipelined_ms"] == pytest.approx(0.57)
    assert row["d1_predicted_pct"] == pytest.approx((1.0 / 0.57 * (1 - 1 / STEPS) - 1) * 100)
    assert row["tensor_parallel"] == 2 and row["gpu_from"].startswith("each step's slowest of 2")
    assert (row["handoff_lag_ms"], row["handoff_lag_d2_ms"]) == pytest.approx((0.1, 0.0))
    assert row["straggler_extra_d2_ms"] == pytest.approx(STRAGGLER)
    without = predict_runs(runs, steps, n_boot=20).iloc[0]
    assert without["d1_pipelined_ms"] == pytest.approx(0.65)
    assert without["gpu_from"].startswith("rank 0")
    # observed speedups do not depend on the pieces: rank 0's runs, their wall clocks
    assert row["observed_pct"] == without["observed_pct"] == pytest.approx((1.0 / 0.70 - 1) * 100)


def test_a_catalogs_worker_runs_never_pair_as_runs_of_their_own():
    runs, steps, ranks = tables()
    workers = runs.assign(run_id=runs["run_id"] + "-rank1", rank=1)
    table = predict_runs(pd.concat([runs, workers]), steps, n_boot=20)
    assert len(table) == 1 and table.iloc[0]["pairs"] == 1


def test_one_gpu_and_tp_2_side_by_side():
    runs, steps, ranks = tables()
    one = runs.assign(tensor_parallel=1, run_id=runs["run_id"] + "-tp1")
    one_steps = steps.assign(run_id=steps["run_id"] + "-tp1")
    table = predict_runs(
        pd.concat([runs, one]), pd.concat([steps, one_steps]), ranks=ranks, n_boot=20
    )
    assert sorted(table["tensor_parallel"]) == [1, 2]
    assert set(table.loc[table["tensor_parallel"] == 1, "gpu_from"]) == {"one GPU"}
    both = tp_comparison(table)
    assert list(both["tensor_parallel"]) == [1, 2] and set(both["model"]) == {"m"}
    assert tp_columns(one.iloc[:1], one.iloc[1:], ranks) == {
        "tensor_parallel": 1,
        "gpu_from": "one GPU",
    }
