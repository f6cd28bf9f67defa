"""The attention backend interface and the paged KV-cache write both backends share."""

from __future__ import annotations

from typing import Protocol

import torch

from .metadata import AttentionMetadata


class AttentionBackend(Protocol):
    """Attention over flat token batches: [N, heads, head_dim] in, [N, heads, head_dim] out.

    When forward runs, the model has already written the step's K/V into the paged cache
    (store_kv_cache).
    """

    name: str
    # Pages handed to forward() hold a multiple of this many tokens (FA2's paged kernel needs 256).
    block_size_multiple: int
    # True when prefill reads sequence lengths on the device only (meta.seq_lens may be None): the
    # runner then captures whole prefills in CUDA graphs per token bucket.
    static_prefill: bool

    def prepare(
        self, meta: AttentionMetadata, k_cache: torch.Tensor | None, dtype: torch.dtype
    ) -> AttentionMetadata:
        """The step's metadata plus what every layer would otherwise rebuild; once per forward."""

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        k_cache: torch.Tensor | None,
        v_cache: torch.Tensor | None,
        meta: AttentionMetadata,
        scale: float,
    ) -> torch.Tensor: ...


def store_kv_cache(
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Write each token's K/V to its flat slot (page * block_size + offset) of the paged cache.

    No host sync, so it is CUDA-graph safe. Eager: index_copy_ on a flat view, one kernel per cache.
    Under torch.compile the same view form makes Inductor copy the whole cache, while index_put_ on
    (page, offset) becomes an in-place store it fuses with the kernel that produces k.
    """
    if torch.compiler.is_compiling():
        block_size = k_cache.shape[1]
        page, offset = slot_mapping // block_size, slot_mapping % block_size
        k_cache[page, offset] = k
        v_cache[page, offset] = v
    else:
        k_cache.view(-1, *k_cache.shape[2:]).index_copy_(0, slot_mapping, k)
        v_cache.view(-1, *v_cache.shape[2:]).index_copy_(0, slot_mapping, v)
