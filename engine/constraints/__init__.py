"""Constrained decoding: per-request state that says which tokens may come next.

The allowed-token mask of step t+1 depends on the tokens committed up to step t ("forward now,
sample later"): commit calls advance() for each committed token, then finalize calls fill_bitmask()
to build the mask that sample() applies. Specs: "point" and "detect" (formats in
engine/constraints/spatial.py, with or without a tokenizer), "regex:<pattern>" and
"json:<schema json>" (through xgrammar, needs a tokenizer).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from ...core.errors import RequestError
from . import grammar, spatial

CONSTRAINTS = ("point", "detect")  # the names the CLI offers


class Constraint(Protocol):
    def fill_bitmask(self, out: np.ndarray, remaining: int) -> None:
        """Sets `out` (int32 [ceil(V/32)]) to the tokens allowed next. `remaining` counts the tokens
        the request may still emit, this one included; only tokens from which a complete output, EOS
        included, fits in that budget are allowed (point/detect), so a request cut by max_tokens
        still parses."""

    def advance(self, token_id: int) -> None:
        """Commits one token (once per committed token, in order)."""

    def is_complete(self) -> bool:
        """The committed tokens form a complete output (an EOS may still follow)."""


def make_constraint(
    spec: str,
    *,
    vocab_size: int,
    eos_token_ids: Sequence[int],
    tokenizer=None,
    args: dict | None = None,
    max_tokens: int | None = None,
) -> Constraint:
    """A fresh per-request constraint. Unknown specs, bad args and too small budgets raise
    RequestError."""
    kind, body = _split(spec)
    if kind in CONSTRAINTS:
        table = spatial.token_table(
            kind,
            args or {},
            vocab_size=vocab_size,
            eos_token_ids=eos_token_ids,
            tokenizer=tokenizer,
        )
        if max_tokens is not None and max_tokens < table.dist[0]:
            raise RequestError(
                f"max_tokens={max_tokens} is too small for a {kind} output, which needs at least "
                f"{table.dist[0]} tokens including EOS"
            )
        return spatial.SpatialConstraint(table)
    compiled = grammar.compile_grammar(
        kind, body, tokenizer=tokenizer, vocab_size=vocab_size, eos_token_ids=eos_token_ids
    )
    constraint = grammar.GrammarConstraint(compiled, eos_token_ids)
    if not constraint.can_start(vocab_size):
        raise RequestError(f"{kind} {body!r} has no output: no token may begin one")
    return constraint


def min_output_tokens(
    spec: str,
    *,
    vocab_size: int,
    eos_token_ids: Sequence[int],
    tokenizer=None,
    args: dict | None = None,
) -> int:
    """The fewest tokens (EOS included) a complete output of `spec` takes: what max_tokens must
    allow. A grammar's (regex, json) is not known before it runs: 1."""
    kind, _ = _split(spec)
    if kind not in CONSTRAINTS:
        return 1
    table = spatial.token_table(
        kind, args or {}, vocab_size=vocab_size, eos_token_ids=eos_token_ids, tokenizer=tokenizer
    )
    return int(table.dist[0])


def parse_output(
    spec: str,
    token_ids: Sequence[int],
    *,
    tokenizer=None,
    vocab_size: int,
    eos_token_ids=(),
    args: dict | None = None,
) -> object:
    """The value of a complete output: point (x, y); detect [(x, y, size), ...]; regex the text;
    json the decoded JSON. A trailing EOS is optional. ValueError if the tokens do not parse."""
    kind, body = _split(spec)
    if kind in CONSTRAINTS:
        table = spatial.token_table(
            kind,
            args or {},
            vocab_size=vocab_size,
            eos_token_ids=eos_token_ids,
            tokenizer=tokenizer,
        )
        return spatial.parse_text(kind, table.text(token_ids))
    compiled = grammar.compile_grammar(
        kind, body, tokenizer=tokenizer, vocab_size=vocab_size, eos_token_ids=eos_token_ids
    )
    text = grammar.grammar_text(compiled, token_ids, tokenizer, eos_token_ids)
    return json.loads(text) if kind == "json" else text


def _split(spec: str) -> tuple[str, str]:
    kind, _, body = spec.partition(":")
    if (kind in CONSTRAINTS and not body) or (kind in ("regex", "json") and body):
        return kind, body
    raise RequestError(
        f"unknown constraint {spec!r}; use one of {', '.join(CONSTRAINTS)}, regex:<pattern>, "
        "json:<schema>"
    )


__all__ = ["CONSTRAINTS", "Constraint", "make_constraint", "parse_output"]
