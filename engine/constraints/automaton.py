"""A character automaton compiled once against a vocabulary into per-state token bitmask rows.

Compilation runs every candidate token's text through the automaton from every state, so at serving
time a request's whole decode state is one int and fill_bitmask is a numpy row copy. Budget
awareness comes from `dist`: the fewest tokens (the final EOS included) that complete a parse from
each state.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..sampler import bitmask_words

UNREACHABLE = np.iinfo(np.int32).max


@dataclass(frozen=True)
class CharAutomaton:
    """A DFA over characters: transitions[state][char] -> state; state 0 is the start."""

    transitions: Sequence[Mapping[str, int]]
    accepting: frozenset[int]

    @classmethod
    def chain(cls, classes: Sequence[str], accepting: set[int]) -> CharAutomaton:
        """Fixed-length formats: state i reads one character of classes[i] and moves to i + 1."""
        transitions = [{ch: i + 1 for ch in chars} for i, chars in enumerate(classes)] + [{}]
        return cls(transitions, frozenset(accepting))

    @property
    def alphabet(self) -> frozenset[str]:
        return frozenset(ch for edges in self.transitions for ch in edges)

    def walk(self, state: int, text: str) -> int | None:
        for ch in text:
            nxt = self.transitions[state].get(ch)
            if nxt is None:
                return None
            state = nxt
        return state


class TokenTable:
    """The automaton lifted from characters to token ids, with one extra state `done` after EOS."""

    def __init__(
        self,
        automaton: CharAutomaton,
        vocab: Mapping[int, str],
        eos_token_ids: Sequence[int],
        vocab_size: int,
    ):
        self.vocab = dict(vocab)  # candidate token id -> its text
        self.eos_token_ids = tuple(eos_token_ids)
        n = len(automaton.transitions)
        self.done = n
        # next_state[s][token] for every token that keeps state s alive (EOS excluded).
        self.next_state: list[dict[int, int]] = [{} for _ in range(n + 1)]
        for s in range(n):
            for token, text in self.vocab.items():
                nxt = automaton.walk(s, text)
                if nxt is not None:
                    self.next_state[s][token] = nxt
        self.accepting = np.array([s in automaton.accepting for s in range(n)] + [False])
        self.dist = self._distances()
        self.costs, self.masks = self._budget_rows(bitmask_words(vocab_size))

    def _distances(self) -> np.ndarray:
        """Fewest tokens to a complete output from each state, counting the EOS (done: 0)."""
        predecessors: list[set[int]] = [set() for _ in self.next_state]
        for s, edges in enumerate(self.next_state):
            for nxt in edges.values():
                predecessors[nxt].add(s)
        dist = np.full(self.done + 1, UNREACHABLE, dtype=np.int64)
        dist[self.done] = 0
        frontier = [s for s in range(self.done) if self.accepting[s]]  # one EOS away
        dist[frontier] = 1
        while frontier:  # breadth-first over reversed token edges
            nxt_frontier = []
            for s in frontier:
                for p in predecessors[s]:
                    if dist[p] == UNREACHABLE:
                        dist[p] = dist[s] + 1
                        nxt_frontier.append(p)
            frontier = nxt_frontier
        return dist

    def _budget_rows(self, words: int) -> tuple[list[list[int]], list[np.ndarray]]:
        """Per state: the ascending budgets at which more tokens become allowed, and the cumulative
        mask rows."""
        costs, masks = [], []
        for s, edges in enumerate(self.next_state):
            cost_of: dict[int, int] = {
                t: int(self.dist[nxt]) + 1
                for t, nxt in edges.items()
                if self.dist[nxt] != UNREACHABLE
            }
            if s == self.done or self.accepting[s]:
                cost_of.update({eos: 1 for eos in self.eos_token_ids})
            levels = sorted(set(cost_of.values())) or [1]
            rows = np.zeros((len(levels), words), dtype=np.uint32)
            for i, level in enumerate(levels):
                set_bits(rows[i], [t for t, c in cost_of.items() if c <= level])
            costs.append(levels)
            masks.append(rows.view(np.int32))
        return costs, masks

    def fill_bitmask(self, out: np.ndarray, state: int, remaining: int) -> None:
        """Allows the tokens after which a complete output still fits in `remaining` tokens (this
        one included). If none fits (the budget was already too small), allows the cheapest ones."""
        level = max(bisect.bisect_right(self.costs[state], remaining) - 1, 0)
        out[:] = self.masks[state][level]

    def advance(self, state: int, token_id: int) -> int:
        if token_id in self.eos_token_ids and (state == self.done or self.accepting[state]):
            return self.done
        nxt = self.next_state[state].get(token_id)
        if nxt is None:
            raise ValueError(f"token {token_id} is not allowed in state {state}")
        return nxt

    def text(self, token_ids: Sequence[int]) -> str:
        """The text of a complete output (a trailing EOS optional); ValueError if it is not one."""
        state = 0
        for token in token_ids:
            state = self.advance(state, token)
        if state != self.done and not self.accepting[state]:
            raise ValueError(f"output is incomplete (stopped in state {state})")
        return "".join(self.vocab[t] for t in token_ids if t in self.vocab)


def set_bits(row: np.ndarray, token_ids: Sequence[int]) -> None:
    """Sets bit (t % 32) of word (t // 32) of a uint32 row for each token id."""
    ids = np.asarray(token_ids, dtype=np.int64)
    np.bitwise_or.at(row, ids >> 5, (np.uint32(1) << (ids & 31).astype(np.uint32)))
