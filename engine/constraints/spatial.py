"""The spatial skills, point and detect, as fixed-format text automata.

Output formats (coordinates normalised to [0, 1), three decimals each):
- point:  "x,y"                           e.g. "0.512,0.334"
- detect: objects "x,y,size" joined by ";"  e.g. "0.100,0.200,0.050;0.400,0.500,0.100"
  between args["min_objects"] (default 1) and args["max_objects"] (default 5) objects; EOS may
  follow any complete object, and after max_objects it is the only choice.
Every output ends with one of the model's EOS tokens.

With a tokenizer the automaton runs over the real vocabulary strings. Without one (random-weight
presets), a fixed tokenizer-free vocabulary stands in: ids 100..109 are the digits 0..9, 110 is ".",
111 is ",", 112 is ";" (TOKENIZER_FREE_VOCAB), so the same constrained workloads run on any preset.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence

import numpy as np

from ...core.errors import RequestError
from .automaton import UNREACHABLE, CharAutomaton, TokenTable

DIGITS = "0123456789"
NUMBER = ["0", ".", DIGITS, DIGITS, DIGITS]
TOKENIZER_FREE_VOCAB: dict[int, str] = {100 + d: str(d) for d in range(10)} | {
    110: ".",
    111: ",",
    112: ";",
}
DEFAULT_MAX_OBJECTS = 5
MAX_OBJECTS_LIMIT = 64  # bounds the automaton (17 states per object)


class SpatialConstraint:
    """Per-request decode state of a point/detect output: one int into a shared TokenTable."""

    def __init__(self, table: TokenTable):
        self.table = table
        self.state = 0

    def fill_bitmask(self, out: np.ndarray, remaining: int) -> None:
        self.table.fill_bitmask(out, self.state, remaining)

    def advance(self, token_id: int) -> None:
        self.state = self.table.advance(self.state, token_id)

    def is_complete(self) -> bool:
        return self.state == self.table.done or bool(self.table.accepting[self.state])


def automaton(kind: str, args: dict) -> CharAutomaton:
    """The character automaton of a point or detect output (args validated here)."""
    if kind == "point":
        _check_args(kind, args, allowed=())
        return CharAutomaton.chain(NUMBER + [","] + NUMBER, accepting={2 * len(NUMBER) + 1})
    min_objects, max_objects = _object_range(args)
    obj = NUMBER + [","] + NUMBER + [","] + NUMBER
    classes = obj + ([";"] + obj) * (max_objects - 1)
    # after[n]: the state after n + 1 objects.
    after = [(n + 1) * len(obj) + n for n in range(max_objects)]
    accepting = {after[n - 1] for n in range(max(min_objects, 1), max_objects + 1)}
    if min_objects == 0:
        accepting.add(0)
    return CharAutomaton.chain(classes, accepting)


def parse_text(kind: str, text: str) -> tuple[float, float] | list[tuple[float, ...]]:
    """point -> (x, y); detect -> [(x, y, size), ...] (text already validated by the automaton)."""
    if kind == "point":
        x, y = text.split(",")
        return float(x), float(y)
    return [tuple(float(v) for v in obj.split(",")) for obj in text.split(";")] if text else []


_tables_by_tokenizer: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_tokenizer_free_tables: dict = {}


def token_table(
    kind: str, args: dict, *, vocab_size: int, eos_token_ids: Sequence[int], tokenizer=None
) -> TokenTable:
    """The compiled table for (spec, args, vocabulary), built once and cached per tokenizer."""
    cache = (
        _tokenizer_free_tables
        if tokenizer is None
        else _tables_by_tokenizer.setdefault(tokenizer, {})
    )
    key = (kind, repr(sorted(args.items())), vocab_size, tuple(eos_token_ids))
    if key not in cache:  # args are validated here, on the first request that uses them
        fsm = automaton(kind, args)
        cache[key] = TokenTable(
            fsm,
            _candidate_vocab(fsm, cache, tokenizer, vocab_size, eos_token_ids),
            eos_token_ids,
            vocab_size,
        )
    table = cache[key]
    if table.dist[0] == UNREACHABLE:
        raise RequestError(f"the vocabulary cannot express a {kind} output")
    return table


def _candidate_vocab(
    fsm: CharAutomaton, cache: dict, tokenizer, vocab_size: int, eos_token_ids: Sequence[int]
) -> dict[int, str]:
    """Token ids whose whole text is made of the automaton's characters (all others are never
    allowed). Decoding tokens one at a time is exact for byte-level BPE vocabularies (SmolLM2,
    Qwen3, Llama 3)."""
    if tokenizer is None:
        if vocab_size <= max(TOKENIZER_FREE_VOCAB) or set(eos_token_ids) & set(
            TOKENIZER_FREE_VOCAB
        ):
            raise RequestError(
                f"tokenizer-free constraints need ids 100..112 free for digits and separators "
                f"(vocab_size={vocab_size}, eos={tuple(eos_token_ids)})"
            )
        return TOKENIZER_FREE_VOCAB
    n = min(vocab_size, len(tokenizer))
    # Decoding 50-150k tokens takes a fraction of a second: once per tokenizer.
    if ("texts", n) not in cache:
        cache["texts", n] = tokenizer.batch_decode(
            [[i] for i in range(n)], clean_up_tokenization_spaces=False
        )
    alphabet = fsm.alphabet
    return {
        i: text
        for i, text in enumerate(cache["texts", n])
        if text and i not in eos_token_ids and set(text) <= alphabet
    }


def _object_range(args: dict) -> tuple[int, int]:
    _check_args("detect", args, allowed=("min_objects", "max_objects"))
    max_objects = args.get("max_objects", DEFAULT_MAX_OBJECTS)
    min_objects = args.get("min_objects", 1)
    if not isinstance(max_objects, int) or not 1 <= max_objects <= MAX_OBJECTS_LIMIT:
        raise RequestError(
            f"detect max_objects must be an int in 1..{MAX_OBJECTS_LIMIT}, got {max_objects!r}"
        )
    if not isinstance(min_objects, int) or not 0 <= min_objects <= max_objects:
        raise RequestError(
            f"detect min_objects must be an int in 0..max_objects ({max_objects}), "
            f"got {min_objects!r}"
        )
    return min_objects, max_objects


def _check_args(kind: str, args: dict, allowed: tuple[str, ...]) -> None:
    unknown = sorted(set(args) - set(allowed))
    if unknown:
        raise RequestError(
            f"unknown {kind} constraint args {unknown}; allowed: {list(allowed) or 'none'}"
        )
