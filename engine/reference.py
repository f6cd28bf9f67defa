"""The simplest correct greedy decoder: the oracle the batching engine is tested against."""

from __future__ import annotations

from collections.abc import Collection

import torch

from .attention.metadata import AttentionMetadata
from .loader import LoadedModel


@torch.inference_mode()
def greedy_reference(
    loaded: LoadedModel,
    prompt_ids: list[int],
    max_new_tokens: int,
    stop_token_ids: Collection[int] = (),
) -> list[int]:
    """Generated ids (a stop token, if hit, is the last). Recomputes the whole prefix per token."""
    model = loaded.model
    device = model.embed_tokens.weight.device
    ids, generated = list(prompt_ids), []
    for _ in range(max_new_tokens):
        hidden = model(
            torch.tensor(ids, device=device),
            torch.arange(len(ids), device=device),
            AttentionMetadata.for_prompts([len(ids)], device),
        )
        token = int(model.compute_logits(hidden[-1:]).argmax(-1))
        generated.append(token)
        ids.append(token)
        if token in stop_token_ids:
            break
    return generated
