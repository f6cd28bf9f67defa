"""Token sampling on the device: bitmask, temperature, top-k, top-p, then Gumbel-max.

Two properties the pipelined loop relies on:
- No host synchronisation. Every branch is on host-side flags of the SamplingBatch, never on device
  data, and every shape is known on the host, so finalize only enqueues kernels.
- Batch invariance. Row i's token depends only on logits[i] and row i's parameters. Randomness comes
  from a counter-based hash of (seed, counter, token id) instead of a torch.Generator, so a row
  samples the same token whatever batch it lands in, whichever step it is replayed on after
  preemption, at any depth.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch

from .sampling_params import SamplingParams

_M32 = 0xFFFFFFFF
# Multipliers of a lowbias32-style integer hash (Wellons' hash-prospector). Both are below 2^31,
# so with 32-bit inputs every product stays below 2^63: int64 tensor arithmetic is exact anywhere.
_MUL1, _MUL2 = 0x21F0AAAD, 0x735A2D97
_GOLDEN = 0x1E3779B9  # odd, < 2^31: spreads consecutive ids/counters over 32 bits
_TOP_P_ONE = 1 << 40  # fixed-point scale of the exact integer top-p prefix sums


class SamplingFlags(NamedTuple):
    """Host-side facts about a batch's parameters: the sampler branches on these, not on the
    device's data."""

    all_greedy: bool
    any_top_k: bool
    any_top_p: bool
    max_top_k: int = 0

    @classmethod
    def of(cls, params) -> SamplingFlags:
        """The flags of a batch whose rows sample with `params` (SamplingParams, one per row)."""
        return cls(
            all(p.temperature == 0 for p in params),
            any(p.top_k > 0 for p in params),
            any(p.top_p < 1.0 for p in params),
            max(p.top_k for p in params),
        )


@dataclass
class SamplingBatch:
    """Per-row sampling parameters of one step, as device tensors, plus host-side flags."""

    temperature: torch.Tensor  # [B] float32, 0 = greedy
    top_k: torch.Tensor  # [B] int32, 0 = off
    top_p: torch.Tensor  # [B] float32, 1 = off
    seed: torch.Tensor  # [B] int32, non-negative (31-bit)
    counter: torch.Tensor  # [B] int32: index of the generated token being sampled (0 = first)
    all_greedy: bool  # host-side flags: the sampler branches on these, never on device data
    any_top_k: bool
    any_top_p: bool
    max_top_k: int = 0  # host-side: largest top_k in the batch (the topk width); 0 = unknown -> V

    @classmethod
    def build(
        cls,
        params: Sequence[SamplingParams],
        seeds: Sequence[int],
        counters: Sequence[int],
        device: torch.device | str = "cpu",
    ) -> SamplingBatch:
        """Packs per-request params into device tensors (one small upload per field)."""

        def put(values: list, dtype: torch.dtype) -> torch.Tensor:
            return torch.tensor(values, dtype=dtype).to(device, non_blocking=True)

        top_ks = [p.top_k for p in params]
        return cls(
            temperature=put([p.temperature for p in params], torch.float32),
            top_k=put(top_ks, torch.int32),
            top_p=put([p.top_p for p in params], torch.float32),
            seed=put([s & 0x7FFFFFFF for s in seeds], torch.int32),
            counter=put(list(counters), torch.int32),
            all_greedy=all(p.greedy for p in params),
            any_top_k=any(k > 0 for k in top_ks),
            any_top_p=any(p.top_p < 1.0 for p in params),
            max_top_k=max(top_ks, default=0),
        )


def bitmask_words(vocab_size: int) -> int:
    """int32 words per bitmask row (the xgrammar layout)."""
    return (vocab_size + 31) // 32


_bit_shifts: dict[torch.device, torch.Tensor] = {}


def apply_bitmask(logits: torch.Tensor, bitmask: torch.Tensor) -> torch.Tensor:
    """Logits with each token whose bit is clear set to -inf (bit j of word w: token 32*w+j)."""
    shifts = _bit_shifts.get(logits.device)
    if shifts is None:
        shifts = _bit_shifts[logits.device] = torch.arange(
            32, dtype=torch.int32, device=logits.device
        )
    vocab_size = logits.shape[-1]
    allowed = ((bitmask.unsqueeze(-1) >> shifts) & 1).flatten(-2)[..., :vocab_size].bool()
    return logits.masked_fill(~allowed, float("-inf"))


def sample(
    logits: torch.Tensor, batch: SamplingBatch, bitmask: torch.Tensor | None = None
) -> torch.Tensor:
    """Samples one token id per row: [B, V] logits -> [B] int64. Free of host synchronisation."""
    if bitmask is not None:
        logits = apply_bitmask(logits.float(), bitmask)
    if batch.all_greedy:
        return logits.argmax(dim=-1)  # the model dtype's argmax: casting is exact and monotonic
    if not (batch.any_top_k or batch.any_top_p):
        columns = column_keys(logits.shape[-1], logits.device)
        return _call(
            temperature_sample, logits, batch.temperature, batch.seed, batch.counter, columns
        )

    logits = logits.float()
    greedy = logits.argmax(dim=-1)
    is_sampled = batch.temperature > 0
    temperature = torch.where(is_sampled, batch.temperature, 1.0)
    logits = logits / temperature.unsqueeze(-1)
    if batch.any_top_p:
        # One sort serves both filters: top-k and top-p both keep a prefix of the descending order.
        sorted_desc = logits.sort(dim=-1, descending=True).values
        if batch.any_top_k:
            k_floor = _top_k_floor(sorted_desc, batch.top_k)
            # The nucleus is taken within the top k.
            sorted_desc = sorted_desc.masked_fill(sorted_desc < k_floor, float("-inf"))
        floor = _top_p_floor(sorted_desc, batch.top_p)
        if batch.any_top_k:
            floor = torch.maximum(floor, k_floor)
        logits = logits.masked_fill(logits < floor, float("-inf"))
    elif batch.any_top_k:
        width = min(batch.max_top_k or logits.shape[-1], logits.shape[-1])
        floor = _top_k_floor(logits.topk(width, dim=-1).values, batch.top_k)
        logits = logits.masked_fill(logits < floor, float("-inf"))

    columns = column_keys(logits.shape[-1], logits.device)
    sampled = _call(noisy_argmax, logits, row_keys(batch.seed, batch.counter), columns)
    return torch.where(is_sampled, sampled, greedy)


def temperature_sample(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    seed: torch.Tensor,
    counter: torch.Tensor,
    columns: torch.Tensor,
) -> torch.Tensor:
    """The common case, no top-k or top-p: greedy where temperature is 0, else Gumbel-max over
    logits / temperature. One function, so that compiled (warmup) it is one pass over the logits
    where eager takes ~30 kernels and five passes (cast, argmax, divide, noise, argmax)."""
    logits = logits.float()
    is_sampled = temperature > 0
    scaled = logits / torch.where(is_sampled, temperature, 1.0).unsqueeze(-1)
    sampled = noisy_argmax(scaled, row_keys(seed, counter), columns)
    return torch.where(is_sampled, sampled, logits.argmax(dim=-1))


def _top_k_floor(sorted_desc: torch.Tensor, top_k: torch.Tensor) -> torch.Tensor:
    """[B, 1] smallest logit in each row's top k (-inf where top-k is off); ties at it are kept."""
    k = top_k.long().clamp(1, sorted_desc.shape[-1]).unsqueeze(-1)
    kth = sorted_desc.gather(-1, k - 1)
    return torch.where(top_k.unsqueeze(-1) > 0, kth, float("-inf"))


def _top_p_floor(sorted_desc: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """[B, 1] smallest logit of each row's nucleus, the shortest prefix whose probability reaches
    top_p.

    The prefix sums are taken over probabilities rounded to 2^-40 in int64, which is exact: a float
    cumsum's rounding depends on which kernel runs, and that depends on the batch shape.
    """
    probs = sorted_desc.softmax(dim=-1)
    fixed = (probs * _TOP_P_ONE).long()  # float32 * 2^40 truncates to int64 exactly
    mass_before = fixed.cumsum(dim=-1) - fixed
    limit = (top_p.double() * _TOP_P_ONE).long().unsqueeze(-1)
    # >= 1 (the top token has nothing before it); the clamp guards a row whose mask allowed nothing.
    n_keep = (mass_before < limit).sum(dim=-1, keepdim=True).clamp_(min=1)
    floor = sorted_desc.gather(-1, n_keep - 1)
    return torch.where(top_p.unsqueeze(-1) < 1.0, floor, float("-inf"))


_column_keys: dict[tuple[int, torch.device], torch.Tensor] = {}
# torch.compile'd versions of the functions below, by function: set by warmup() on CUDA.
_compiled: dict[Callable, Callable] = {}


def row_keys(seed: torch.Tensor, counter: torch.Tensor) -> torch.Tensor:
    """[B] int64 32-bit key per row: a pure function of (seed, counter)."""
    return _mix32(_mix32(seed.long()) ^ ((counter.long() * _GOLDEN) & _M32))


def column_keys(vocab_size: int, device: torch.device) -> torch.Tensor:
    """[V] int64 32-bit key per token id, computed once per (V, device)."""
    keys = _column_keys.get((vocab_size, device))
    if keys is None:
        ids = torch.arange(vocab_size, dtype=torch.int64, device=device)
        keys = _column_keys[(vocab_size, device)] = _mix32((ids * _GOLDEN) & _M32)
    return keys


def gumbel_noise(row_key: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
    """[B, V] float32 Gumbel(0, 1) noise from hash(row key xor token key).

    The top 23 bits of the hash make a uniform in (0, 1) that float32 holds exactly: finite noise.
    """
    bits = _mix32(row_key.unsqueeze(-1) ^ columns) >> 9
    uniform = (bits.float() + 0.5) * (1.0 / (1 << 23))
    return -torch.log(-torch.log(uniform))


def noisy_argmax(
    logits: torch.Tensor, row_key: torch.Tensor, columns: torch.Tensor
) -> torch.Tensor:
    """Gumbel-max: argmax(logits + noise) draws from softmax(logits)."""
    return (logits + gumbel_noise(row_key, columns)).argmax(dim=-1)


def _call(fn: Callable, *args: torch.Tensor) -> torch.Tensor:
    """fn compiled when warmup compiled it and the tensors are on CUDA, else eager."""
    compiled = _compiled.get(fn)
    if compiled is None or args[0].device.type != "cuda":
        return fn(*args)
    try:
        return compiled(*args)
    except Exception as e:  # a compiler problem must not take the engine down: go on eager
        warnings.warn(
            f"torch.compile of the sampler failed, sampling eagerly: {str(e).splitlines()[0]}",
            stacklevel=2,
        )
        _compiled.clear()
        return fn(*args)


def _triton_temperature_sample(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    seed: torch.Tensor,
    counter: torch.Tensor,
    columns: torch.Tensor,
) -> torch.Tensor:
    """temperature_sample in Triton (engine/triton_sampler.py), which hashes column ids itself."""
    from .triton_sampler import temperature_sample as kernel  # Triton: only where it runs

    return kernel(logits, temperature, seed, counter, (_GOLDEN, _MUL1, _MUL2))


def warmup(vocab_size: int, device: torch.device | str) -> None:
    """Call before timing starts. On CUDA, switches the sampling math to fused kernels (elementwise
    math plus exact argmaxes, so rows stay batch-invariant): the common case (temperature_sample)
    to two Triton kernels over vocabulary chunks, Gumbel-max after top-k / top-p (noisy_argmax) to
    one torch.compile'd kernel, instead of ~20 eager passes over [B, V] int64; and builds them now
    for a batch of 1 and for larger ones. Without warmup, sampling stays eager."""
    if torch.device(device).type == "cuda" and not _compiled:
        _compiled[noisy_argmax] = torch.compile(noisy_argmax, dynamic=True, fullgraph=True)
        _compiled[temperature_sample] = _triton_temperature_sample
    for rows in (1, 2):
        logits = torch.zeros(rows, vocab_size, device=device)
        for params in (SamplingParams(temperature=1.0), SamplingParams(temperature=1.0, top_k=2)):
            sample(logits, SamplingBatch.build([params] * rows, range(rows), range(rows), device))


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """A bijective 32-bit integer hash (lowbias32 shape) on int64 tensors of values in [0, 2^32)."""
    x = x ^ (x >> 16)
    x = (x * _MUL1) & _M32
    x = x ^ (x >> 15)
    x = (x * _MUL2) & _M32
    return x ^ (x >> 15)
