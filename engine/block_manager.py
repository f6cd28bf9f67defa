"""Paged KV cache bookkeeping: fixed-size pages from one pool, per-sequence page tables, refcounts.

Policy: pages grow on demand. Admission takes pages for the prompt; each decode step that crosses a
page boundary takes one more. When the pool runs dry the scheduler preempts (recompute). One scratch
page beyond the pool absorbs writes from padded CUDA-graph rows and is never handed out.
"""

from __future__ import annotations

from collections import deque

from .sequence import Sequence


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int):
        assert num_blocks > 0 and block_size > 0
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.scratch_block = num_blocks  # index of the extra page in the KV tensors
        self.ref_counts = [0] * num_blocks
        self.free_ids: deque[int] = deque(range(num_blocks))

    @property
    def num_free(self) -> int:
        return len(self.free_ids)

    def blocks_needed(self, seq: Sequence, num_tokens: int) -> int:
        """Pages still to allocate so that positions [0, num_tokens) of `seq` have a home."""
        return max(0, -(-num_tokens // self.block_size) - len(seq.block_table))

    def can_allocate(self, n: int) -> bool:
        return n <= len(self.free_ids)

    def allocate(self, seq: Sequence, num_tokens: int) -> None:
        n = self.blocks_needed(seq, num_tokens)
        assert n <= len(self.free_ids), "caller must check can_allocate first"
        for _ in range(n):
            block = self.free_ids.popleft()
            assert self.ref_counts[block] == 0
            self.ref_counts[block] = 1
            seq.block_table.append(block)

    def free(self, seq: Sequence) -> None:
        for block in seq.block_table:
            assert self.ref_counts[block] == 1, f"page {block} freed twice"
            self.ref_counts[block] = 0
            self.free_ids.append(block)
        seq.block_table.clear()

    def slot(self, seq: Sequence, position: int) -> int:
        """Flat KV slot (page * block_size + offset) of a token position."""
        return (
            seq.block_table[position // self.block_size] * self.block_size
            + position % self.block_size
        )

    def check_all_free(self) -> None:
        assert len(self.free_ids) == self.num_blocks and not any(self.ref_counts), "KV pages leaked"
