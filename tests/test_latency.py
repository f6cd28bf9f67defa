"""Per-request latency as serving benchmarks report it (issue #17 item 7), from the engine's own
commit times: TTFT from queueing to the first token, TPOT over the tokens after it, ITL pooled."""

from __future__ import annotations

import pytest

from bubblelab.core.sequence import Sequence
from bubblelab.engine.sampling_params import SamplingParams
from bubblelab.runs.driver import run_workload
from bubblelab.runs.latency import latency_summary, request_latency
from bubblelab.runs.workload import WorkloadSpec
from tests.engine_helpers import make_engine

MS = 1_000_000


def seq(arrival_ms: float, token_ms: list[float]) -> Sequence:
    s = Sequence("r", [1, 2], SamplingParams())
    s.arrival_ns, s.token_ns = int(arrival_ms * MS), [int(t * MS) for t in token_ms]
    return s


def test_ttft_tpot_itl_by_their_definitions():
    a, b, c = seq(0, [10, 12, 16]), seq(5, [25, 26]), seq(0, [7])
    assert request_latency(a) == {"ttft_ms": 10, "tpot_ms": 3, "e2e_ms": 16}
    assert request_latency(c) == {"ttft_ms": 7, "tpot_ms": None, "e2e_ms": 7}
    summary = latency_summary([a, b, c])
    assert summary["ttft_ms"]["mean"] == pytest.approx((10 + 20 + 7) / 3)
    assert summary["ttft_ms"]["median"] == 10
    assert summary["tpot_ms"]["mean"] == pytest.approx(2)  # (3 + 1) / 2: c has one token
    assert summary["itl_ms"]["median"] == 2  # the gaps 2, 4 and 1, pooled
    assert summary["itl_ms"]["p99"] == pytest.approx(4, abs=0.1)
    assert latency_summary([])["ttft_ms"] == {"mean": None, "median": None, "p99": None}


def test_commit_times_are_recorded_only_when_asked(tiny_llama):
    engine = make_engine(tiny_llama)
    spec = WorkloadSpec(
        streams=2, requests=4, output_len_mean=5, output_len_dist="fixed", prompt_len=4
    )
    plain = run_workload(engine, spec, warmup=False)
    assert plain.latency == {} and not engine.record_token_times
    timed = run_workload(engine, spec, warmup=False, latency=True)
    assert timed.outputs == plain.outputs  # timing changes no token
    assert not engine.record_token_times  # off again after the run
    for rid, r in timed.request_latency.items():
        assert 0 < r["ttft_ms"] <= r["e2e_ms"] and r["tpot_ms"] > 0, rid
    assert timed.latency["itl_ms"]["median"] > 0
