"""Per-step attention inputs.

One AttentionMetadata object per step, passed down through forward() (never a global "current step"
context): at depth 2 two steps are in flight, each with its own metadata in its own DecodeSlot.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class AttentionMetadata:
    is_prefill: bool
    # [N] int64: flat KV slot (page * block_size + offset) each token's K/V is written to. None: no
    # KV cache (reference/parity runs). Padded graph rows point at a scratch page nobody reads.
    slot_mapping: torch.Tensor | None = None
    # Prefill: varlen causal attention over each sequence's own tokens (no prefix cache).
    cu_seqlens: torch.Tensor | None = None  # [B+1] int32
    max_seqlen: int = 0
    # The same lengths on the host, so no backend syncs to read them.
    seq_lens: list[int] | None = None
    # Decode: one query token per row attending to its paged cache.
    context_lens: torch.Tensor | None = None  # [B] int32, includes the current token
    block_tables: torch.Tensor | None = None  # [B, max_blocks] int32
    # Set by the backend's prepare(), once per step: the torch backend's additive decode mask
    # [B, 1, 1, L].
    attn_bias: torch.Tensor | None = None
    # Per-step values a prefill backend derives once and every layer reuses (see padded_index).
    step_cache: dict = field(default_factory=dict, repr=False, compare=False)

    def padded_index(self) -> torch.Tensor:
        """[N] int64: where each flat prefill token sits in a [B * max_seqlen] padded layout
        (b * max + pos).

        Built from cu_seqlens on its own device with host-known sizes (no sync), once per step.
        """
        index = self.step_cache.get("padded_index")
        if index is None:
            cu, lens = self.cu_seqlens, self.seq_lens
            assert cu is not None and lens is not None, "a padded prefill needs its lengths"
            total = sum(lens)
            starts = torch.arange(len(lens), device=cu.device) * self.max_seqlen - cu[:-1]
            index = torch.arange(total, device=cu.device) + starts.repeat_interleave(
                cu.diff(), output_size=total
            )
            self.step_cache["padded_index"] = index
        return index

    @staticmethod
    def for_prompts(seq_lens: list[int], device: torch.device | str = "cpu") -> AttentionMetadata:
        """Prefill metadata without a KV cache: what parity tests and simple scoring need."""
        cu = torch.zeros(len(seq_lens) + 1, dtype=torch.int32)
        cu[1:] = torch.cumsum(torch.tensor(seq_lens, dtype=torch.int32), 0)
        return AttentionMetadata(
            is_prefill=True,
            cu_seqlens=cu.to(device),
            max_seqlen=max(seq_lens),
            seq_lens=list(seq_lens),
        )
