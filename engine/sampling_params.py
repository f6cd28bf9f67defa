"""Per-request generation options, validated on construction."""

from __future__ import annotations

from dataclasses import dataclass, field

from bubblelab.errors import RequestError


@dataclass
class SamplingParams:
    temperature: float = 0.0  # 0 = greedy
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1 = off
    max_tokens: int = 64
    seed: int | None = None  # per-request seed; None derives one from the request id
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    constraint: str | None = None  # None | "point" | "detect" | "regex:<pattern>" | "json:<schema>"
    constraint_args: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.max_tokens <= 0:
            raise RequestError(f"max_tokens must be > 0, got {self.max_tokens}")
        if self.temperature < 0:
            raise RequestError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise RequestError(f"top_k must be >= 0, got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise RequestError(f"top_p must be in (0, 1], got {self.top_p}")
        self.stop_token_ids = tuple(self.stop_token_ids)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0
