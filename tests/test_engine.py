"""The blocking engine's serving behaviour (issue: Engine): batching, paging, preemption,
constraints, errors."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bubblelab.core.errors import RequestError
from bubblelab.engine.constraints import parse_output
from bubblelab.engine.reference import greedy_reference
from bubblelab.engine.sampling_params import SamplingParams
from tests.engine_helpers import Req, make_engine, run_script


def _prompts(n: int, seed: int, vocab: int = 512) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, vocab) for _ in range(rng.randrange(1, 24))] for _ in range(n)]


@pytest.mark.parametrize("family", ["tiny_llama", "tiny_qwen3"])
def test_batched_greedy_equals_each_request_alone(family, request):
    loaded = request.getfixturevalue(family)
    prompts = _prompts(6, seed=3)
    lens = [5, 17, 1, 30, 9, 22]
    reqs = [
        Req(f"r{i}", p, SamplingParams(max_tokens=n, ignore_eos=True))
        for i, (p, n) in enumerate(zip(prompts, lens, strict=True))
    ]
    batched = run_script(make_engine(loaded, depth=1), reqs)
    for i, (p, n) in enumerate(zip(prompts, lens, strict=True)):
        alone = run_script(
            make_engine(loaded, depth=1),
            [Req("solo", p, SamplingParams(max_tokens=n, ignore_eos=True))],
        )
        assert batched.tokens[f"r{i}"] == alone.tokens["solo"] == greedy_reference(loaded, p, n)


def test_preemption_and_readmission_give_the_same_outputs(tiny_llama):
    prompts = _prompts(8, seed=5)
    reqs = [
        Req(f"r{i}", p, SamplingParams(max_tokens=40, ignore_eos=True))
        for i, p in enumerate(prompts)
    ]
    roomy = run_script(make_engine(tiny_llama, depth=1), reqs)
    # 20 pages of 4 tokens cannot hold 8 sequences of up to 63 tokens: the scheduler must preempt.
    tight = run_script(make_engine(tiny_llama, depth=1, num_kv_blocks=20, max_model_len=64), reqs)
    assert roomy.preemptions == 0 and tight.preemptions > 0
    assert tight.tokens == roomy.tokens


def test_finished_requests_free_every_page(tiny_qwen3):
    engine = make_engine(tiny_qwen3)
    reqs = [
        Req(f"r{i}", p, SamplingParams(max_tokens=7)) for i, p in enumerate(_prompts(10, seed=1))
    ]
    out = run_script(engine, reqs)  # run_script ends with engine.check_idle()
    assert engine.blocks.num_free == engine.blocks.num_blocks
    assert not engine.has_unfinished()
    for r in reqs:  # every request finished by itself (none left behind, none aborted)
        tokens, reason = out.tokens[r.rid], out.reasons[r.rid]
        assert reason in ("stop", "length") and 1 <= len(tokens) <= 7
        assert (reason == "length") == (len(tokens) == 7 and tokens[-1] not in engine.eos_token_ids)


@pytest.mark.parametrize("kind", ["point", "detect"])
def test_constrained_outputs_always_parse(tiny_llama, kind):
    cfg = tiny_llama.config
    reqs = [
        Req(f"r{i}", p, SamplingParams(max_tokens=m, temperature=1.0, seed=i, constraint=kind))
        for i, (p, m) in enumerate(zip(_prompts(6, seed=9), [20, 24, 30, 64, 25, 40], strict=True))
    ]
    out = run_script(make_engine(tiny_llama), reqs)
    for tokens in out.tokens.values():
        parse_output(kind, tokens, vocab_size=cfg.vocab_size, eos_token_ids=cfg.eos_token_ids)


def test_bad_requests_are_rejected_and_the_others_keep_running(tiny_llama):
    engine = make_engine(tiny_llama, max_model_len=32)
    engine.add_request("good", [5, 6, 7], SamplingParams(max_tokens=5, ignore_eos=True))
    bad = {
        "prompt longer than max_model_len": lambda: engine.add_request(
            "long", list(range(3, 40)), SamplingParams()
        ),
        "max_tokens <= 0": lambda: engine.add_request("zero", [5], SamplingParams(max_tokens=0)),
        "temperature < 0": lambda: engine.add_request(
            "cold", [5], SamplingParams(temperature=-1.0)
        ),
        "unknown constraint": lambda: engine.add_request(
            "odd", [5], SamplingParams(constraint="haiku")
        ),
        "empty prompt": lambda: engine.add_request("empty", [], SamplingParams()),
    }
    for what, call in bad.items():
        with pytest.raises(RequestError) as e:
            call()
        assert "\n" not in str(e.value), what
    tokens = []
    while engine.has_unfinished():
        tokens += [t for o in engine.step() for t in o.new_token_ids]
    assert tokens == greedy_reference(tiny_llama, [5, 6, 7], 5)
    engine.check_idle()


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_random_workloads_keep_the_scheduler_invariants(tiny_qwen3, data):
    n = data.draw(st.integers(1, 10))
    reqs = []
    for i in range(n):
        prompt = data.draw(st.lists(st.integers(3, 511), min_size=1, max_size=30))
        params = SamplingParams(
            max_tokens=data.draw(st.integers(1, 40)),
            stop_token_ids=tuple(data.draw(st.sets(st.integers(3, 511), max_size=40))),
            temperature=data.draw(st.sampled_from([0.0, 0.8])),
            seed=i,
        )
        reqs.append(
            Req(
                f"r{i}",
                prompt,
                params,
                arrive_tick=data.draw(st.integers(0, 30)),
                abort_tick=data.draw(st.one_of(st.none(), st.integers(0, 60))),
            )
        )
    engine = make_engine(
        tiny_qwen3,
        depth=data.draw(st.sampled_from([1, 2])),
        num_kv_blocks=data.draw(st.sampled_from([20, 40, 128])),
        max_model_len=72,
    )
    out = run_script(engine, reqs)  # asserts: no leaked pages, rows or refs, pipeline drained
    for r in reqs:
        toks = out.tokens[r.rid]
        assert len(toks) <= r.params.max_tokens
        if out.reasons[r.rid] == "stop":
            assert toks[-1] in r.params.stop_token_ids or toks[-1] in engine.eos_token_ids
        assert not any(t in r.params.stop_token_ids for t in toks[:-1])
