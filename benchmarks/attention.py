"""A loaded model's attention backend swapped in place: one copy of the weights (and of the compiled
fused ops) serves several backends in one benchmark run."""

from __future__ import annotations

from bubblelab.engine.attention import AttentionBackend
from bubblelab.engine.models.transformer import Attention, TransformerLM


def use_backend(model: TransformerLM, backend: AttentionBackend) -> AttentionBackend:
    """Point the model and every attention layer at `backend` (engines built afterwards capture
    their graphs with it); returns it."""
    model.attn_backend = backend
    for module in model.modules():
        if isinstance(module, Attention):
            module.backend = backend
    return backend
