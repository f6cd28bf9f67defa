"""A request's state as the scheduler and the loop see it (plain Python: the engine's requests and
the cost model's replayed ones are the same class)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from enum import Enum, auto
from typing import Any

_ids = itertools.count()


class SequenceStatus(Enum):
    WAITING = auto()  # queued for (re-)prefill
    RUNNING = auto()  # holds a batch row and KV pages
    FINISHED = auto()  # finalized and released


@dataclass(eq=False)
class Sequence:
    """Committed tokens live in `token_ids`; `num_launched` also counts tokens still in flight.

    Positions: a prefill launch over n committed tokens samples position n; each decode launch feeds
    the last launched token (read on the device from the pending-token buffer) and samples the next
    position.
    """

    request_id: str
    token_ids: list[int]
    params: Any  # engine SamplingParams, or a replayed request: the scheduler reads max_tokens
    constraint: Any = None  # engine.constraints Constraint, or None for plain text
    seed: int = 0  # per-request sampling seed (31-bit)
    seq_id: int = field(default_factory=lambda: next(_ids))
    status: SequenceStatus = SequenceStatus.WAITING
    num_prompt_tokens: int = 0
    num_launched: int = 0  # positions whose token is committed or being sampled by a launched step
    block_table: list[int] = field(default_factory=list)
    row: int | None = None  # batch row in the device pending-token buffer
    # The post's zombie fields: finished early, released late.
    finalized: bool = False  # hit EOS / length cap / abort: no more tokens are appended
    inflight_refs: int = 0  # launched-but-uncommitted steps that contain this sequence (0..2)
    preempted: bool = False  # leaving the batch to be recomputed once inflight_refs reaches 0
    finish_reason: str | None = None
    # Latency, on the host's perf_counter_ns clock: when the request was queued, and when each
    # output token was committed (recorded only while the engine's record_token_times is on).
    arrival_ns: int = 0
    token_ns: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.num_prompt_tokens = len(self.token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def output_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def num_generated(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def num_generated_launched(self) -> int:
        return self.num_launched - self.num_prompt_tokens

    @property
    def schedulable(self) -> bool:
        """May join the next decode step: running, not finished or leaving, cap not yet launched."""
        return (
            self.status is SequenceStatus.RUNNING
            and not self.finalized
            and not self.preempted
            and self.num_generated_launched < self.params.max_tokens
        )
