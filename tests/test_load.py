"""The load result of issue #14, at a size a CPU runs in seconds: random lengths, requests aborted
mid-flight, constrained ones, KV pressure with preemptions. Every request finishes or is aborted, no
page, row or inflight reference leaks (run_script ends with check_idle), and depth 1 and depth 2
give the same tokens."""

from __future__ import annotations

import random

from bubblelab.engine.constraints import parse_output
from bubblelab.engine.sampling_params import SamplingParams
from tests.engine_helpers import Req, make_engine, run_script

REQUESTS = 160
ABORTED = 0.12
CONSTRAINED = 0.2


def workload(seed: int = 14) -> list[Req]:
    rng = random.Random(seed)
    reqs = []
    for i in range(REQUESTS):
        prompt = [rng.randrange(3, 512) for _ in range(rng.randrange(1, 30))]
        arrive = rng.randrange(0, 400)
        abort = arrive + rng.randrange(0, 40) if rng.random() < ABORTED else None
        if rng.random() < CONSTRAINED:
            kind = rng.choice(["point", "detect"])
            params = SamplingParams(max_tokens=64, temperature=1.0, seed=i, constraint=kind)
        else:
            params = SamplingParams(max_tokens=rng.randrange(1, 40), ignore_eos=True, seed=i)
        reqs.append(Req(f"r{i}", prompt, params, arrive_tick=arrive, abort_tick=abort))
    return reqs


def test_load_depth_1_equals_depth_2_with_aborts_constraints_and_preemption(tiny_llama):
    reqs = workload()
    outcomes = {}
    for depth in (1, 2):
        # 48 pages of 4 tokens for 16 rows of up to 93 tokens: the scheduler must preempt.
        engine = make_engine(
            tiny_llama, depth=depth, max_num_seqs=16, num_kv_blocks=48, max_model_len=96
        )
        outcomes[depth] = run_script(engine, reqs)  # ends with check_idle: nothing leaked
        assert not engine.has_unfinished()
    one, two = outcomes[1], outcomes[2]
    assert one.preemptions > 0 and two.preemptions > 0
    aborted = {r.rid for r in reqs if r.abort_tick is not None}
    assert 0.08 * REQUESTS < len(aborted) < 0.16 * REQUESTS
    cfg = tiny_llama.config
    for r in reqs:
        assert set(one.reasons) == set(two.reasons) == {q.rid for q in reqs}
        if r.rid in aborted:  # stopped at a different tick per depth: one is a prefix of the other
            a, b = sorted((one.tokens[r.rid], two.tokens[r.rid]), key=len)
            assert b[: len(a)] == a
            continue
        assert one.tokens[r.rid] == two.tokens[r.rid], r.rid
        assert one.reasons[r.rid] == two.reasons[r.rid] in ("stop", "length")
        if r.params.constraint is None:
            assert len(one.tokens[r.rid]) == r.params.max_tokens
        elif one.reasons[r.rid] == "stop":
            parse_output(
                r.params.constraint,
                one.tokens[r.rid],
                vocab_size=cfg.vocab_size,
                eos_token_ids=cfg.eos_token_ids,
            )
