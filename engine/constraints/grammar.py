"""regex: and json: constraints through xgrammar, an optional dependency imported on first use.

xgrammar's bitmask layout (int32 [B, ceil(V/32)], bit j of word w = token 32w+j) is ours, so its
matcher fills our host bitmask rows directly. Budget awareness is partial: a grammar is too general
for a distance table, so only the last token of the budget is forced to EOS when the output is
complete by then; a request that is still mid-grammar at max_tokens is cut there.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Sequence

import numpy as np

from ...core.errors import RequestError
from .automaton import set_bits

# tokenizer -> {(V, eos): compiler}
_compilers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class GrammarConstraint:
    """Per-request xgrammar matcher state."""

    def __init__(self, compiled_grammar, eos_token_ids: Sequence[int]):
        import xgrammar

        self.matcher = xgrammar.GrammarMatcher(compiled_grammar)
        self.eos_token_ids = list(eos_token_ids)

    def fill_bitmask(self, out: np.ndarray, remaining: int) -> None:
        # The last token: end while the output parses.
        if remaining == 1 and self.matcher.is_completed():
            out[:] = 0
            set_bits(out.view(np.uint32), self.eos_token_ids)
        else:
            self.matcher.fill_next_token_bitmask(out.reshape(1, -1))

    def can_start(self, vocab_size: int) -> bool:
        """Some token (EOS included) may come first: the grammar has an output at all."""
        first = np.zeros(-(-vocab_size // 32), np.int32)
        self.matcher.fill_next_token_bitmask(first.reshape(1, -1))
        return bool(first.any())

    def advance(self, token_id: int) -> None:
        if not self.matcher.accept_token(token_id):
            raise ValueError(f"token {token_id} is not allowed by the grammar")

    def is_complete(self) -> bool:
        return self.matcher.is_completed()


def compile_grammar(
    kind: str, body: str, *, tokenizer, vocab_size: int, eos_token_ids: Sequence[int]
):
    """Compiles a regex or JSON schema for this tokenizer (xgrammar caches compiled grammars)."""
    try:
        import xgrammar
    except ImportError as e:
        raise RequestError(
            f"{kind}: constraints need xgrammar, which is not installed (pip install xgrammar)"
        ) from e
    if tokenizer is None:
        raise RequestError(f"{kind}: constraints need a tokenizer; this model has none")
    per_tokenizer = _compilers.setdefault(tokenizer, {})
    key = (vocab_size, tuple(eos_token_ids))
    if key not in per_tokenizer:
        info = xgrammar.TokenizerInfo.from_huggingface(
            tokenizer, vocab_size=vocab_size, stop_token_ids=list(eos_token_ids)
        )
        per_tokenizer[key] = xgrammar.GrammarCompiler(info)
    compiler = per_tokenizer[key]
    try:
        return (
            compiler.compile_regex(body) if kind == "regex" else compiler.compile_json_schema(body)
        )
    except RuntimeError as e:
        # xgrammar prefixes "[time] file.cc:line: "; keep the message a user can act on.
        reason = re.sub(r"^\[[^\]]*\] \S+: ", "", str(e).strip().splitlines()[0])
        raise RequestError(f"invalid {kind}: {reason}") from None


def grammar_text(
    compiled_grammar, token_ids: Sequence[int], tokenizer, eos_token_ids: Sequence[int]
) -> str:
    """Decoded text of a complete grammar output (trailing EOS optional); else ValueError."""
    constraint = GrammarConstraint(compiled_grammar, eos_token_ids)
    for token in token_ids:
        constraint.advance(token)
    if not constraint.is_complete():
        raise ValueError("output does not complete the grammar")
    return tokenizer.decode([t for t in token_ids if t not in eos_token_ids])
