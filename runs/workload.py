"""Benchmark workloads: N concurrent streams, output lengths of a given mean, optional arrivals and
constraints."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.checks import check_choice, check_float, check_int
from ..core.errors import OptionError
from ..engine.sampling_params import SamplingParams

DISTRIBUTIONS = ("uniform", "exponential", "fixed")
CONSTRAINTS = ("point", "detect")
MAX_STREAMS = 4096
MAX_REQUESTS = 1_000_000
MAX_LEN = 1_000_000.0
MAX_WORKLOAD_TOKENS = 50_000_000


def check_streams_fit(counts: list[int], rows: int, option: str | None = None) -> None:
    """Every stream a batch row of its own (`rows` of them, set by `option` if the user gave it):
    more streams than rows would only queue, and the run would measure a smaller batch than it
    names."""
    if max(counts) > rows:
        limit = f"{option} ({rows})" if option else f"{rows} batch rows"
        raise OptionError(
            "streams", f"must fit {limit}: more streams than rows would only queue", max(counts)
        )


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
        check_int("streams", self.streams, 1, MAX_STREAMS)
        if self.requests is None:
            self.requests = 4 * self.streams
        check_int("requests", self.requests, 1, MAX_REQUESTS)
        check_float("output_len_mean", self.output_len_mean, 1, MAX_LEN)
        check_choice("output_len_dist", self.output_len_dist, DISTRIBUTIONS)
        check_int("prompt_len", self.prompt_len, 1, int(MAX_LEN))
        if self.arrival_rate is not None:  # None: closed loop
            check_float("arrival_rate", self.arrival_rate, 0, 1e9, lo_open=True)
        if self.constraint is not None:
            check_choice("constraint", self.constraint, CONSTRAINTS)
        check_float("constrained_share", self.constrained_share, 0, 1)
        if self.constrained_share > 0 and self.constraint is None:
            raise OptionError(
                "constrained_share", "needs a constraint (point or detect)", self.constrained_share
            )
        check_float("temperature", self.temperature, 0, 100)
        check_int("seed", self.seed, 0, 2**31)
        tokens = self.requests * (self.prompt_len + self.output_len_mean)
        if tokens > MAX_WORKLOAD_TOKENS:  # prompts and outputs are kept on the host
            fit = int(MAX_WORKLOAD_TOKENS // (self.prompt_len + self.output_len_mean))
            raise OptionError(
                "requests",
                f"must be at most {fit} at these lengths (the workload's "
                f"{MAX_WORKLOAD_TOKENS:,} tokens must fit in host memory)",
                self.requests,
            )

    def check_fits(self, max_model_len: int) -> None:
        """A prompt leaves room for output in a sequence, and the mean length fits: else every
        request is refused, or L is not the L asked for."""
        if self.prompt_len >= max_model_len:
            raise OptionError(
                "prompt_len", f"must be < max_model_len ({max_model_len})", self.prompt_len
            )
        if self.prompt_len + self.output_len_mean > max_model_len:
            raise OptionError(
                "output_len_mean",
                f"must be <= max_model_len - prompt_len ({max_model_len - self.prompt_len})",
                self.output_len_mean,
            )


@dataclass
class Request:
    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    arrival_s: float  # offset from the run's start (0 for closed-loop runs)


def output_lengths(spec: WorkloadSpec, rng: np.random.Generator) -> np.ndarray:
    L, n = spec.output_len_mean, spec.requests
    assert n is not None  # WorkloadSpec.__post_init__ filled in the default
    if spec.output_len_dist == "fixed":
        return np.full(n, round(L))
    if spec.output_len_dist == "exponential":
        return np.maximum(1, np.round(rng.exponential(L, n))).astype(int)
    return rng.integers(max(1, round(L / 2)), round(3 * L / 2) + 1, n)


def _draws(spec: WorkloadSpec, rng: np.random.Generator):
    """Each request's output length, whether it is constrained, and its arrival (s): the seed's
    first draws, in this order (arrival_times redraws them)."""
    assert spec.requests is not None  # WorkloadSpec.__post_init__ filled in the default
    lengths = output_lengths(spec, rng)
    constrained = rng.random(spec.requests) < spec.constrained_share
    arrivals = (
        np.cumsum(rng.exponential(1.0 / spec.arrival_rate, spec.requests))
        if spec.arrival_rate
        else np.zeros(spec.requests)
    )
    return lengths, constrained, arrivals


def arrival_times(spec: WorkloadSpec) -> np.ndarray:
    """When make_requests(spec) lets each request be sent (s from the run's start; 0: closed
    loop)."""
    return _draws(spec, np.random.default_rng(spec.seed))[2]


def make_requests(spec: WorkloadSpec, vocab_size: int) -> list[Request]:
    """Random-token prompts (a forward's cost does not depend on token values), seeded lengths."""
    assert spec.requests is not None  # WorkloadSpec.__post_init__ filled in the default
    rng = np.random.default_rng(spec.seed)
    lengths, constrained, arrivals = _draws(spec, rng)
    # Stay clear of special tokens.
    low, high = min(100, vocab_size // 4), max(101, vocab_size - 1000)
    requests = []
    for i in range(spec.requests):
        prompt = rng.integers(low, high, spec.prompt_len).tolist()
        if constrained[i]:
            # The grammar decides the length and EOS ends it; max_tokens is the budget it must fit.
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
