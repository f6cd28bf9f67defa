"""Nothing poisons the engine (issue #28): a grammar no output satisfies, an exception inside
`generate` or inside a tick, a prompt of the wrong type. Each ends in one RequestError or ends its
own requests alone; the engine object stays usable, with nothing queued, nothing left in
`engine.seqs`, every KV page and batch row free and request ids still advancing."""

from __future__ import annotations

import pytest

from bubblelab.core.errors import RequestError
from bubblelab.engine.constraints import parse_output
from bubblelab.engine.llm import LLM
from bubblelab.engine.reference import greedy_reference
from bubblelab.engine.sampling_params import SamplingParams
from tests.engine_helpers import make_engine

GREEDY = SamplingParams(max_tokens=6, ignore_eos=True)
PROMPTS = [[5, 6, 7], [9], [11, 12], [40, 41, 42, 43]]


def wrap(engine) -> LLM:
    """The public API over an engine built on a shared tiny model."""
    out = LLM.__new__(LLM)
    out.engine, out.tokenizer = engine, engine.tokenizer
    return out


@pytest.fixture(params=[1, 2], ids=["depth1", "depth2"])
def llm(tiny_llama, request):
    return wrap(make_engine(tiny_llama, depth=request.param, max_model_len=64))


@pytest.fixture(scope="module")
def smol():
    """The embedded SmolLM2 (it has a tokenizer: text prompts and grammars)."""
    with LLM(max_model_len=256) as llm:
        yield llm


def assert_clean(llm: LLM) -> None:
    """Nothing queued, running or in flight; every page, row and reference back (real checks)."""
    engine = llm.engine
    assert not engine.seqs and not engine.has_unfinished()
    assert not engine.scheduler.waiting and not engine.scheduler.running
    engine.check_idle()  # InvariantError (I2, I4, I7) otherwise, under python -O too
    assert engine.blocks.num_free == engine.blocks.num_blocks


def assert_serves(llm: LLM, loaded) -> list[str]:
    """The same object answers a plain batch right after, exactly; returns its request ids."""
    out = llm.generate(PROMPTS, GREEDY)
    assert [o.token_ids for o in out] == [greedy_reference(loaded, p, 6) for p in PROMPTS]
    assert_clean(llm)
    return [o.request_id for o in out]


# -- exceptions inside generate --------------------------------------------------------------------
class Boom(Exception):
    pass


@pytest.mark.parametrize("after", [1, 2, 3, 7])
@pytest.mark.parametrize("error", [Boom, KeyboardInterrupt])
def test_an_on_step_callback_raising_aborts_its_own_requests(llm, tiny_llama, after, error):
    before = assert_serves(llm, tiny_llama)
    calls = []

    def on_step():
        calls.append(1)
        if len(calls) == after:
            raise error("stop here")

    with pytest.raises(error):
        llm.generate(PROMPTS, SamplingParams(max_tokens=20, ignore_eos=True), on_step=on_step)
    assert len(calls) == after
    assert_clean(llm)  # none left queued, none left in engine.seqs, every page free
    again = assert_serves(llm, tiny_llama)
    assert not set(again) & set(before), "request ids advance"


@pytest.mark.parametrize("phase", ["launch", "finalize", "wait", "accept", "committed"])
@pytest.mark.parametrize("at", [1, 2, 5])
def test_an_exception_inside_a_tick_leaves_the_engine_usable(llm, tiny_llama, phase, at):
    """Ctrl-C can land anywhere in a tick: here, in each phase of the loop's work."""
    engine = llm.engine
    real = getattr(engine, phase)
    calls = []

    def broken(*args):
        calls.append(1)
        if len(calls) == at:
            raise KeyboardInterrupt
        return real(*args)

    engine.__dict__[phase] = broken
    try:
        with pytest.raises(KeyboardInterrupt):
            llm.generate(PROMPTS, SamplingParams(max_tokens=20, ignore_eos=True))
    finally:
        del engine.__dict__[phase]
    assert calls, f"{phase} never ran"
    assert_clean(llm)
    assert_serves(llm, tiny_llama)


def test_cancel_ends_requests_added_directly(llm, tiny_llama):
    engine = llm.engine
    for i, p in enumerate(PROMPTS):
        engine.add_request(f"r{i}", p, SamplingParams(max_tokens=30, ignore_eos=True))
    for _ in range(3):
        engine.step()
    engine.cancel(["r0", "r2"])
    assert set(engine.seqs) == {"r1", "r3"}
    while engine.has_unfinished():
        engine.step()
    assert [len(engine.seqs[r].output_ids) for r in ("r1", "r3")] == [30, 30]
    engine.cancel(["r1", "r3", "never-added"])
    assert_clean(llm)
    assert_serves(llm, tiny_llama)


# -- bad prompts: one RequestError naming the position or the field --------------------------------
BAD_PROMPTS = {
    "None": (None, "prompts"),
    "an int": (3, "prompts"),
    "a generator": ((t for t in [5, 6]), "prompts"),
    "bytes": (b"abc", "prompts"),
    "a list of bytes": ([b"abc"], "prompt 0"),
    "a generator among prompts": ([[5], (t for t in [5])], "prompt 1"),
    "None among prompts": ([[5], None], "prompt 1"),
    "a dict": ([{"a": 1}], "prompt 0"),
    "a None token": ([[5, None]], "prompt 0"),
    "a nested list": ([[5, [6]]], "prompt 0"),
}


@pytest.mark.parametrize(("prompts", "named"), BAD_PROMPTS.values(), ids=BAD_PROMPTS.keys())
def test_a_prompt_of_the_wrong_type_is_one_request_error(llm, tiny_llama, prompts, named):
    with pytest.raises(RequestError) as e:
        llm.generate(prompts, GREEDY)
    message = str(e.value)
    assert "\n" not in message and message.startswith(named), message
    assert_clean(llm)
    assert_serves(llm, tiny_llama)


BAD_PARAMS = {
    "stop_token_ids=None": (dict(stop_token_ids=None), "stop_token_ids"),
    "stop_token_ids=5": (dict(stop_token_ids=5), "stop_token_ids"),
    "stop_token_ids of text": (dict(stop_token_ids=["a"]), "stop_token_ids"),
    "constraint=5": (dict(constraint=5), "constraint"),
    "constraint_args=None": (dict(constraint_args=None), "constraint_args"),
    "ignore_eos='yes'": (dict(ignore_eos="yes"), "ignore_eos"),
    "max_tokens=None": (dict(max_tokens=None), "max_tokens"),
}


@pytest.mark.parametrize(("options", "field"), BAD_PARAMS.values(), ids=BAD_PARAMS.keys())
def test_sampling_params_of_the_wrong_type_are_one_request_error(options, field):
    with pytest.raises(RequestError) as e:
        SamplingParams(**options)
    assert str(e.value).startswith(field) and "\n" not in str(e.value)


@pytest.mark.parametrize(
    ("prompt", "named"),
    [("\ud800", "prompt 0: .*character 0"), (["fine", "bad \udcff"], "prompt 1: .*character 4")],
)
def test_text_that_is_not_unicode_is_one_request_error(smol, prompt, named):
    with pytest.raises(RequestError, match=named):
        smol.generate(prompt, SamplingParams(max_tokens=2))
    assert_clean(smol)


# -- grammars --------------------------------------------------------------------------------------
def test_a_grammar_nothing_satisfies_is_refused_and_poisons_nothing(smol):
    for _ in range(2):
        with pytest.raises(RequestError, match=r"^prompt 0: regex .*no output"):
            smol.generate("hi", SamplingParams(max_tokens=4, constraint="regex:[^\\s\\S]"))
        assert_clean(smol)
    out = smol.generate(["hi", "hello"], SamplingParams(max_tokens=4, ignore_eos=True))
    assert [len(o.token_ids) for o in out] == [4, 4]
    assert_clean(smol)


def test_a_grammar_that_dead_ends_ends_that_request_alone(smol):
    params = [
        SamplingParams(max_tokens=8, constraint="regex:a[^\\s\\S]"),  # "a", then nothing
        SamplingParams(max_tokens=8, ignore_eos=True),
    ]
    dead, plain = smol.generate(["hi", "hi"], params)
    assert dead.finish_reason == "dead_end" and smol.tokenizer.decode(dead.token_ids) == "a"
    assert plain.finish_reason == "length" and len(plain.token_ids) == 8
    assert_clean(smol)


def test_a_json_output_cut_by_its_budget_says_so(smol):
    spec = 'json:{"type": "object"}'
    cut = smol.generate("hi", SamplingParams(max_tokens=2, constraint=spec))[0]
    assert cut.finish_reason == "cut" and len(cut.token_ids) == 2
    engine = smol.engine
    vocab = dict(vocab_size=engine.loaded.config.vocab_size, tokenizer=smol.tokenizer)
    with pytest.raises(ValueError):
        parse_output(spec, cut.token_ids, **vocab)
    whole = smol.generate("hi", SamplingParams(max_tokens=64, constraint=spec))[0]
    assert whole.finish_reason in ("stop", "length")
    assert isinstance(parse_output(spec, whole.token_ids, **vocab, eos_token_ids=[2]), dict)
    assert_clean(smol)
