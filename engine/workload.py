"""Benchmark workloads: N concurrent streams, output lengths with a given mean, optional arrivals and constraints."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bubblelab.engine.sampling_params import SamplingParams
from bubblelab.errors import BubblelabError

DISTRIBUTIONS = ("uniform", "exponential", "fixed")


@dataclass
class WorkloadSpec:
    streams: int = 8  # requests kept in flight (closed loop) or admitted at once
    requests: int | None = None  # total requests; default 4 x streams
    output_len_mean: float = 110.0  # the post's L
    output_len_dist: str = "uniform"  # uniform on [L/2, 3L/2], exponential (min 1), or fixed
    prompt_len: int = 32
    arrival_rate: float | None = None  # Poisson arrivals per second; None = closed loop
    constraint: str | None = None  # "point" | "detect" | None
    constrained_share: float = 0.0  # share of requests carrying the constraint
    temperature: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.streams < 1:
            raise BubblelabError(f"streams must be >= 1, got {self.streams}")
        if self.requests is None:
            self.requests = 4 * self.streams
        if self.requests < 1:
            raise BubblelabError(f"requests must be >= 1, got {self.requests}")
        if self.output_len_mean < 1:
            raise BubblelabError(f"output length mean must be >= 1, got {self.output_len_mean}")
        if self.output_len_dist not in DISTRIBUTIONS:
            raise BubblelabError(
                f"unknown output length distribution {self.output_len_dist!r}; "
                f"choose {', '.join(DISTRIBUTIONS)}"
            )
        if not 0.0 <= self.constrained_share <= 1.0:
            raise BubblelabError(
                f"constrained share must be in [0, 1], got {self.constrained_share}"
            )
        if self.constrained_share > 0 and self.constraint is None:
            raise BubblelabError("a constrained share needs a constraint (point or detect)")


@dataclass
class Request:
    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    arrival_s: float  # offset from the run's start (0 for closed-loop runs)


def output_lengths(spec: WorkloadSpec, rng: np.random.Generator) -> np.ndarray:
    L, n = spec.output_len_mean, spec.requests
    if spec.output_len_dist == "fixed":
        return np.full(n, round(L))
    if spec.output_len_dist == "exponential":
        return np.maximum(1, np.round(rng.exponential(L, n))).astype(int)
    return rng.integers(max(1, round(L / 2)), round(3 * L / 2) + 1, n)


def make_requests(spec: WorkloadSpec, vocab_size: int) -> list[Request]:
    """Random-token prompts (the forward cost does not depend on token values) with seeded lengths."""
    rng = np.random.default_rng(spec.seed)
    lengths = output_lengths(spec, rng)
    constrained = rng.random(spec.requests) < spec.constrained_share
    arrivals = (
        np.cumsum(rng.exponential(1.0 / spec.arrival_rate, spec.requests))
        if spec.arrival_rate
        else np.zeros(spec.requests)
    )
    low, high = (
        min(100, vocab_size // 4),
        max(101, vocab_size - 1000),
    )  # stay clear of special tokens
    requests = []
    for i in range(spec.requests):
        prompt = rng.integers(low, high, spec.prompt_len).tolist()
        if constrained[i]:
            # Grammar decides the length; EOS ends it. max_tokens is the budget the constraint must fit.
            params = SamplingParams(
                temperature=spec.temperature,
                max_tokens=max(int(lengths[i]), 64),
                seed=spec.seed * 1_000_003 + i,
                constraint=spec.constraint,
            )
        else:
            params = SamplingParams(
                temperature=spec.temperature,
                max_tokens=int(lengths[i]),
                ignore_eos=True,
                seed=spec.seed * 1_000_003 + i,
            )
        requests.append(Request(f"req-{i}", prompt, params, float(arrivals[i])))
    return requests
