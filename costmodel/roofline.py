"""The roofline floor of a whole run: the least time any engine could take on this hardware.

    floor = prefill FLOPs / (N x matmul peak)
            + decode steps x decode weight bytes / (N x copy bandwidth)

Prefill is priced at compute (every prompt token goes through every matrix), a decode step at memory
(it reads every weight once, whatever the batch). N is the number of GPUs the weights are split over
(tensor parallel). Left out, so the floor stays a lower bound: KV-cache reads, activations, the
compute of decode steps and the memory traffic of prefill.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


class ModelShape(Protocol):
    """What the floor reads of a model: its shape (engine.config.ModelConfig is one). The cost model
    stays torch-free, so it takes any object with these numbers."""

    @property
    def vocab_size(self) -> int: ...
    @property
    def hidden_size(self) -> int: ...
    @property
    def intermediate_size(self) -> int: ...
    @property
    def num_layers(self) -> int: ...
    @property
    def num_heads(self) -> int: ...
    @property
    def num_kv_heads(self) -> int: ...
    @property
    def head_dim(self) -> int: ...
    @property
    def qk_norm(self) -> bool: ...  # a norm on q and k per head (Qwen3)


FORMULA = (
    "floor = prefill FLOPs / (N x matmul peak) + decode steps x decode weight bytes / "
    "(N x copy bandwidth); N = GPUs the weights are split over"
)


def layer_matmul_params(cfg: ModelShape) -> int:
    """Weights of one layer's matrices: q, k, v, o projections and the gated MLP."""
    q, kv = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    return cfg.hidden_size * (q + 2 * kv + q + 3 * cfg.intermediate_size)


def decode_weight_bytes(cfg: ModelShape, itemsize: int) -> int:
    """Bytes a decode step must read: every layer's matrices and norms, the final norm and the LM
    head. The embedding table counts only as the LM head (tied or not, a step gathers just its
    batch's rows of it)."""
    norms = 2 * cfg.hidden_size + (2 * cfg.head_dim if cfg.qk_norm else 0)
    per_layer = layer_matmul_params(cfg) + norms
    return itemsize * (
        cfg.num_layers * per_layer + cfg.hidden_size + cfg.vocab_size * cfg.hidden_size
    )


def prefill_flops(cfg: ModelShape, prompt_lens: Sequence[int]) -> float:
    """2 x the multiply-adds of prefilling these prompts: the matrices for every token, causal
    attention (QK^T and PV over the keys at or before each query), the LM head for each prompt's
    last token only."""
    tokens = sum(prompt_lens)
    causal_pairs = sum(n * (n + 1) // 2 for n in prompt_lens)
    matmuls = 2 * cfg.num_layers * layer_matmul_params(cfg) * tokens
    attention = 2 * 2 * cfg.num_layers * cfg.num_heads * cfg.head_dim * causal_pairs
    lm_head = 2 * cfg.hidden_size * cfg.vocab_size * len(prompt_lens)
    return float(matmuls + attention + lm_head)


def min_decode_steps(output_lens: Sequence[int], streams: int) -> int:
    """Decode steps of an ideal continuous batcher with `streams` slots: each request's first token
    comes from its prefill, the rest take one step each, at most `streams` requests share a step."""
    rest = [n - 1 for n in output_lens]
    if not rest:
        return 0
    return max(max(rest), math.ceil(sum(rest) / streams))


@dataclass(frozen=True)
class Floor:
    prefill_flops: float
    decode_steps: int
    weight_bytes: int
    matmul_peak: float  # FLOP/s of one GPU
    copy_bandwidth: float  # bytes/s of one GPU, read + write
    gpus: int = 1

    @property
    def prefill_s(self) -> float:
        return self.prefill_flops / (self.gpus * self.matmul_peak)

    @property
    def decode_s(self) -> float:
        return self.decode_steps * self.weight_bytes / (self.gpus * self.copy_bandwidth)

    @property
    def seconds(self) -> float:
        return self.prefill_s + self.decode_s


def run_floor(
    cfg: ModelShape,
    itemsize: int,
    prompt_lens: Sequence[int],
    output_lens: Sequence[int],
    streams: int,
    matmul_peak: float,
    copy_bandwidth: float,
    gpus: int = 1,
) -> Floor:
    """The floor of a run of these requests with at most `streams` in flight."""
    return Floor(
        prefill_flops(cfg, prompt_lens),
        min_decode_steps(output_lens, streams),
        decode_weight_bytes(cfg, itemsize),
        matmul_peak,
        copy_bandwidth,
        gpus,
    )
