"""Atomic requests: a batch is validated whole before anything is queued, and an engine stays
usable after any RequestError (issue #14 item 1)."""

from __future__ import annotations

import pytest

from bubblelab.core.errors import RequestError
from bubblelab.engine.llm import LLM
from bubblelab.engine.reference import greedy_reference
from bubblelab.engine.sampling_params import SamplingParams
from tests.engine_helpers import make_engine

GREEDY = SamplingParams(max_tokens=4, ignore_eos=True)


@pytest.fixture
def llm(tiny_llama):
    out = LLM.__new__(LLM)  # the public API over a shared tiny model
    out.engine, out.tokenizer = make_engine(tiny_llama, max_model_len=32), None
    return out


BAD_BATCHES = {
    "an empty prompt among good ones": [[5, 6], []],
    "no prompts at all": [],
    "a float token": [[5, 6.0]],
    "a text token": [[5, "a"]],
    "a bool token": [[5, True]],
    "a token outside the vocabulary": [[5], [600]],
    "a negative token": [[-1]],
    "a prompt longer than max_model_len": [[5], list(range(3, 40))],
    "text without a tokenizer": ["hello"],
    "a prompt that is not a sequence": [[5], 7.5],
}


@pytest.mark.parametrize("batch", BAD_BATCHES.values(), ids=BAD_BATCHES.keys())
def test_a_bad_batch_queues_nothing_and_the_engine_stays_usable(llm, tiny_llama, batch):
    with pytest.raises(RequestError) as e:
        llm.generate(batch, GREEDY)
    assert "\n" not in str(e.value)
    assert not llm.engine.seqs and not llm.engine.has_unfinished()
    out = llm.generate([[5, 6, 7], [9]], GREEDY)  # the same object, right after
    assert [o.token_ids for o in out] == [
        greedy_reference(tiny_llama, [5, 6, 7], 4),
        greedy_reference(tiny_llama, [9], 4),
    ]
    llm.engine.check_idle()


def test_a_bad_prompt_is_named_by_its_position(llm):
    with pytest.raises(RequestError, match=r"^prompt 1: empty prompt$"):
        llm.generate([[5, 6], []], GREEDY)
    with pytest.raises(RequestError, match=r"^prompt 0: token id out of the vocabulary"):
        llm.generate([[600], [5]], GREEDY)


def test_mismatched_params_and_duplicate_ids_are_refused_whole(llm):
    with pytest.raises(RequestError, match="2 SamplingParams for 3 prompts"):
        llm.generate([[5], [6], [7]], [GREEDY, GREEDY])
    engine = llm.engine
    with pytest.raises(RequestError, match="appears twice"):
        engine.add_requests([("a", [5], GREEDY), ("a", [6], GREEDY)])
    with pytest.raises(RequestError, match="params must be SamplingParams"):
        engine.add_requests([("a", [5], GREEDY), ("b", [6], {"max_tokens": 3})])
    assert not engine.seqs
    engine.add_request("a", [5], GREEDY)
    with pytest.raises(RequestError, match="already running"):
        engine.add_requests([("b", [6], GREEDY), ("a", [7], GREEDY)])
    assert list(engine.seqs) == ["a"]  # b was not queued either


@pytest.mark.parametrize(
    "options",
    [
        {"temperature": float("nan")},
        {"temperature": -1.0},
        {"top_p": 0.0},
        {"top_k": -1},
        {"max_tokens": 0},
        {"max_tokens": 2.5},
        {"seed": -3},
        {"stop_token_ids": (5, -1)},
    ],
)
def test_sampling_options_are_checked_on_construction(options):
    with pytest.raises(RequestError) as e:
        SamplingParams(**options)
    assert next(iter(options)) in str(e.value) and "\n" not in str(e.value)


def test_numpy_integers_are_token_ids(llm):
    """Token ids are checked by type (numbers.Integral, never bool): numpy's integers pass, as
    ints; the check runs once per distinct type, not per token (a 1024-token prompt paid ~1 ms)."""
    import numpy as np

    want = [o.token_ids for o in llm.generate([[5, 6, 7]], GREEDY)]
    assert [o.token_ids for o in llm.generate([list(np.array([5, 6, 7]))], GREEDY)] == want
    assert [o.token_ids for o in llm.generate([[np.int32(5), 6, np.uint16(7)]], GREEDY)] == want
