"""Per-request generation options, validated on construction."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core.checks import check_float, check_int
from ..core.errors import OptionError, RequestError


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
        try:  # per-request options: a bad one is a RequestError, as the engine's other refusals
            check_float("temperature", self.temperature, 0, 100)
            check_int("top_k", self.top_k, 0)
            check_float("top_p", self.top_p, 0, 1, lo_open=True)
            check_int("max_tokens", self.max_tokens, 1, 1 << 20)
            if self.seed is not None:
                check_int("seed", self.seed, 0, 2**63 - 1)
            if not isinstance(self.stop_token_ids, (list, tuple, set, frozenset)):
                raise OptionError(
                    "stop_token_ids", "must be a list of token ids", self.stop_token_ids
                )
            self.stop_token_ids = tuple(self.stop_token_ids)
            for t in self.stop_token_ids:
                check_int("stop_token_ids", t, 0)
            if not isinstance(self.ignore_eos, bool):
                raise OptionError("ignore_eos", "must be True or False", self.ignore_eos)
            if self.constraint is not None and not isinstance(self.constraint, str):
                raise OptionError("constraint", "must be a string or None", self.constraint)
            if not isinstance(self.constraint_args, dict):
                raise OptionError("constraint_args", "must be a dict", self.constraint_args)
        except OptionError as e:
            raise RequestError(str(e)) from None

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0
