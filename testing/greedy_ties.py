"""Two bf16 greedy runs that differ: a bug, or a tie that rounding decides either way?

CUDA graphs replay a padded batch through other GEMM shapes than the eager path, so their bf16
logits round differently. On random weights the top logits sit close together (qwen3-4b on an
H100: top-2 margins 0.008-0.29 with a bf16 error of 0.13-0.18 against fp32), so graph and eager
greedy can part at a near-tie. A difference is a tie when, at the first position where the two runs
part, the fp32 logits of the two chosen tokens lie closer together than the bf16 forward's error
there; anything wider is a bug in what one of the paths computes.
"""

from __future__ import annotations

import numpy as np
import torch

from bubblelab.engine.attention.metadata import AttentionMetadata
from bubblelab.engine.loader import LoadedModel


def greedy_prompts(vocab: int, n: int = 8) -> list[list[int]]:
    """The GPU acceptance test's prompts: seeded random ids, 16 + 3 i long."""
    rng = np.random.default_rng(0)
    return [rng.integers(100, min(5000, vocab), 16 + 3 * i).tolist() for i in range(n)]


@torch.inference_mode()
def next_logits(loaded: LoadedModel, ids: list[int]) -> torch.Tensor:
    """The next token's logits (as fp32) from one plain forward of the whole prefix."""
    model = loaded.model
    device = model.embed_tokens.weight.device
    hidden = model(
        torch.tensor(ids, device=device),
        torch.arange(len(ids), device=device),
        AttentionMetadata.for_prompts([len(ids)], device),
    )
    return model.compute_logits(hidden[-1:])[0].float()


def fp32_logits(loaded: LoadedModel, prefixes: list[list[int]]) -> list[torch.Tensor]:
    """next_logits computed in fp32 on the same bf16-rounded weights; the weights are put back
    exactly as they were (bf16 -> fp32 -> bf16 is lossless)."""
    params = list(loaded.model.parameters())
    dtypes = [p.dtype for p in params]
    for p in params:
        p.data = p.data.float()
    try:
        return [next_logits(loaded, ids) for ids in prefixes]
    finally:
        for p, dtype in zip(params, dtypes, strict=True):
            p.data = p.data.to(dtype)


def first_difference(a: list[int], b: list[int]) -> int | None:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)


Tokens = dict[str, list[int]]  # request id -> token ids


def divergences(loaded: LoadedModel, prompts: Tokens, a: Tokens, b: Tokens) -> dict[str, dict]:
    """For each request whose greedy tokens in runs a and b differ: where they part, the fp32 gap
    between the two chosen tokens, the bf16 error there, and whether that is a tie."""
    parts = {k: i for k in a if (i := first_difference(a[k], b[k])) is not None}
    prefixes = [prompts[k] + a[k][:i] for k, i in parts.items()]
    bf16 = [next_logits(loaded, ids) for ids in prefixes]
    fp32 = fp32_logits(loaded, prefixes)
    found = {}
    for (k, i), lb, lf in zip(parts.items(), bf16, fp32, strict=True):
        gap = abs(float(lf[a[k][i]] - lf[b[k][i]]))
        error = float((lb - lf).abs().max())
        found[k] = {"position": i, "fp32_gap": gap, "bf16_error": error, "tie": gap <= error}
    return found
