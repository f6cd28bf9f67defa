"""Paged KV cache bookkeeping: fixed-size pages from one pool, per-sequence page tables, refcounts.

Policy: pages grow on demand. Admission takes pages for the prompt; each decode step that crosses a
page boundary takes one more. When the pool runs dry the scheduler preempts (recompute). One scratch
page beyond the pool absorbs writes from padded CUDA-graph rows and is never handed out.

A page is free or held by exactly one sequence, and goes back only when the scheduler releases that
sequence (pipeline invariant I7, checked here on every allocation and free).
"""

from __future__ import annotations

from collections import deque

from .errors import InvariantError
from .sequence import Sequence


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int):
        if num_blocks <= 0 or block_size <= 0:
            raise ValueError(f"a KV pool of {num_blocks} pages of {block_size} tokens")
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
        if n > len(self.free_ids):
            raise InvariantError(7, f"{n} pages asked of {len(self.free_ids)} free (check first)")
        for _ in range(n):
            block = self.free_ids.popleft()
            if self.ref_counts[block]:
                raise InvariantError(7, f"page {block} handed out twice")
            self.ref_counts[block] = 1
            seq.block_table.append(block)

    def free(self, seq: Sequence) -> None:
        if seq.inflight_refs:
            raise InvariantError(7, f"pages freed while {seq.inflight_refs} steps hold them")
        for block in seq.block_table:
            if self.ref_counts[block] != 1:
                raise InvariantError(7, f"page {block} freed twice")
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
        """I7 after a run: every page is back in the pool."""
        if len(self.free_ids) != self.num_blocks or any(self.ref_counts):
            raise InvariantError(7, "KV pages leaked")
