"""The steady-state rule (core.steady), rule by rule, on hand-made per-step tables. The same rule on
ingested traces: test_profiling_queries.py::test_steady_state_rule and the real-trace tests."""

from __future__ import annotations

import math

import pandas as pd

from bubblelab.core.steady import PREFILL_RATIO, WARMUP_STEPS, steady_state, steady_steps

NAN = math.nan


def table(run_id: str, kinds: str, sizes: list[float], busy: list[float] | None = None):
    """One run's per-step table: kinds as letters (p = prefill, d = decode), a period of 1 ms a step
    (none for the last), 1 ms of GPU busy time a step unless given."""
    n = len(kinds)
    return pd.DataFrame(
        {
            "run_id": run_id,
            "step": range(n),
            "kind": ["prefill" if k == "p" else "decode" for k in kinds],
            "batch_size": sizes,
            "busy_ms": busy or [1.0] * n,
            "period_ms": [1.0] * (n - 1) + [NAN],
        }
    )


def steps_of(steady: pd.DataFrame, run_id: str = "a") -> list[int]:
    return steady[steady["run_id"] == run_id]["step"].tolist()


def test_the_defaults():
    assert (WARMUP_STEPS, PREFILL_RATIO) == (5, 2.0)


def test_rule_1_a_decode_step_followed_by_a_decode_step():
    # step 2 is followed by a prefill, step 6 is the last (no period), step 3 is a prefill
    steps = table("a", "pddpddd", [4] * 7)
    assert steps_of(steady_state(steps, warmup=0)) == [1, 4, 5]
    no_period = steps.assign(period_ms=steps["period_ms"].where(steps["step"] != 4))
    assert steps_of(steady_state(no_period, warmup=0)) == [1, 5]


def test_rule_2_the_modal_batch_size_the_larger_on_a_tie():
    ramp = table("a", "pdddddddd", [1, 1, 2, 3, 3, 3, 3, 2, 1])  # 3 is modal: ramp up and down go
    assert steps_of(steady_state(ramp, warmup=0)) == [3, 4, 5, 6]
    tie = table("a", "pdddddd", [2, 2, 2, 4, 4, 1, 1])  # decode 2, 2, 4, 4, 1, 1: the larger, 4
    assert steps_of(steady_state(tie, warmup=0)) == [3, 4]


def test_rule_3_an_unknown_batch_size_keeps_steps_with_real_gpu_work():
    busy = [9.0, 0.01, 4.0, 4.0, 1.9, 2.1, 4.0, 4.0]  # median decode busy 4: at least 2 stays
    foreign = table("a", "pddddddd", [NAN] * 8, busy)
    assert steps_of(steady_state(foreign, warmup=0)) == [2, 3, 5, 6]
    known = table("a", "pddddddd", [8] * 8, busy)  # a known batch size needs no stand-in
    assert steps_of(steady_state(known, warmup=0)) == [1, 2, 3, 4, 5, 6]
    no_busy = known.drop(columns="busy_ms")  # a rank's table: rule 3 cannot apply
    assert steps_of(steady_state(no_busy, warmup=0)) == [1, 2, 3, 4, 5, 6]


def test_rule_4_the_first_candidates_of_each_run_are_warm_up():
    a, b = table("a", "pdddddddd", [2] * 9), table("b", "ddddddddd", [3] * 9)
    both = pd.concat([b.iloc[::-1], a])  # any order in, run by run and step by step out
    steady = steady_state(both, warmup=2)
    assert steady[["run_id", "step"]].values.tolist() == [
        *(["a", s] for s in range(3, 8)),
        *(["b", s] for s in range(2, 8)),
    ]
    assert list(steady.columns) == list(both.columns)
    assert steady.index.tolist() == list(range(len(steady)))
    assert steps_of(steady_state(a)) == [6, 7]  # WARMUP_STEPS
    assert steady_state(a, warmup=9).empty


def test_steady_steps_are_rank_0s_that_every_rank_recorded():
    rank0 = table("tp", "pddddddd", [2] * 8).assign(rank=0)
    rank1 = rank0.assign(rank=1, batch_size=NAN)[rank0["step"] != 4]  # rank 1 lacks step 4
    chosen = steady_steps(pd.concat([rank0, rank1]), warmup=1)
    assert sorted(set(chosen["step"])) == [2, 3, 5, 6]
    assert chosen.groupby("step")["rank"].apply(sorted).tolist() == [[0, 1]] * 4
