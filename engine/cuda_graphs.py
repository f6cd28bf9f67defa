"""Captured CUDA graphs, per DecodeSlot: decode forwards per batch bucket, sampling per bucket and
variant, prefill forwards per token bucket.

A graph replays over its slot's fixed buffers, so each slot has its own set; a step runs the
smallest bucket that holds it, its padding rows or tokens pointed at the pad row and the scratch
page (DecodeSlot.fill_*). One launch replaces hundreds: a decode step's host cost no longer grows
with the model's depth, and a prefill of any size up to the largest bucket is one launch too (vLLM
captures per batch size the same way). A prefill beyond the largest bucket, or on an attention
backend whose prefill kernel needs host-side lengths, runs eagerly: same outputs, host-bound launch.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from .config import PREFILL_BUCKET_STEP
from .decode_slot import DecodeSlot

# Sampling variants with captured graphs, as (all_greedy, masked): greedy or temperature-only rows,
# with or without a constrained-decoding mask. Batches with top-k / top-p sample eagerly (their sort
# width is a batch parameter).
SAMPLING_VARIANTS = [(True, False), (True, True), (False, False), (False, True)]


def decode_buckets(max_rows: int) -> list[int]:
    """Batch sizes with captured decode graphs, like vLLM's; a batch runs the smallest that fits."""
    return sorted(
        {b for b in [1, 2, 4, 8, *range(16, max_rows + 1, 16)] if b <= max_rows} | {max_rows}
    )


def prefill_buckets(max_tokens: int) -> list[int]:
    """Token counts with a captured prefill graph: powers of two up to 512, then steps of 512, so
    padding costs at most a 2x forward for short prompts (weight-bound there anyway), under 2x
    beyond."""
    small = [b for b in (16, 32, 64, 128, 256, 512) if b < max_tokens]
    step = PREFILL_BUCKET_STEP
    return sorted({*small, *range(step, max_tokens, step), max_tokens})


def prefill_rows(tokens: int, max_rows: int) -> int:
    """Rows a prefill graph of `tokens` serves: every sequence has at least one token."""
    return min(tokens, max_rows)


def _smallest(buckets: list[int], n: int) -> int | None:
    return next((b for b in buckets if b >= n), None)


DecodeBody = Callable[[DecodeSlot, int], None]
SampleBody = Callable[[DecodeSlot, int, bool, bool], None]
PrefillBody = Callable[[DecodeSlot, int, int], None]


class CudaGraphs:
    def __init__(self, slots: list[DecodeSlot], max_rows: int, max_tokens: int, prefill: bool):
        self.slots = slots
        self.max_rows = max_rows
        self.buckets = decode_buckets(max_rows)
        self.token_buckets = prefill_buckets(max_tokens) if prefill else []
        self.decode_graphs: list[dict[int, torch.cuda.CUDAGraph]] = [{} for _ in slots]
        self.sample_graphs: list[dict[tuple[int, bool, bool], torch.cuda.CUDAGraph]] = [
            {} for _ in slots
        ]
        self.prefill_graphs: list[dict[int, torch.cuda.CUDAGraph]] = [{} for _ in slots]
        # Replays counted, so a test can prove graphs are not silently off; captures counted, so a
        # timed run can prove it captured none (runs.region).
        self.decode_replays = self.sample_replays = self.prefill_replays = 0
        self.captures = 0
        # Seconds of capture()'s parts (warm-up, where torch.compile compiles; capture; replay).
        self.parts_s: dict[str, float] = {}

    @property
    def captured(self) -> bool:
        return bool(self.decode_graphs[0])

    # -- lookups (None: run eagerly) ---------------------------------------------------------------
    def decode_bucket(self, rows: int) -> int | None:
        return _smallest(self.buckets, rows) if self.decode_graphs[0] else None

    def sample_bucket(self, rows: int, variant: tuple[bool, bool] | None) -> int | None:
        return _smallest(self.buckets, rows) if self.sample_graphs[0] and variant else None

    def prefill_bucket(self, tokens: int) -> int | None:
        return _smallest(self.token_buckets, tokens) if self.prefill_graphs[0] else None

    def replay_decode(self, slot: DecodeSlot, bucket: int) -> None:
        self.decode_replays += 1
        self.decode_graphs[slot.index][bucket].replay()

    def replay_sampling(self, slot: DecodeSlot, bucket: int, variant: tuple[bool, bool]) -> None:
        self.sample_replays += 1
        self.sample_graphs[slot.index][(bucket, *variant)].replay()

    def replay_prefill(self, slot: DecodeSlot, tokens: int) -> None:
        self.prefill_replays += 1
        self.prefill_graphs[slot.index][tokens].replay()

    # -- capture -----------------------------------------------------------------------------------
    def capture(self, decode: DecodeBody, sample: SampleBody, prefill: PrefillBody) -> None:
        """Warm every shape up, then capture, largest first so smaller graphs reuse pool memory,
        then replay each graph once.

        Warm-up runs every bucket before capturing any: lazy inits, autotuning and torch.compile's
        recompiles (static first shape, then dynamic) all settle, so every graph captures the same
        final kernels. A graph's first replay uploads it to the device (milliseconds for a forward):
        done here, it never lands inside a timed run. The caller has filled every slot's buffers
        with padding (valid indices throughout), so the replays write only the pad row and the
        scratch page."""
        t0 = time.perf_counter()
        for b in reversed(self.buckets):
            for slot in self.slots:
                decode(slot, b)
                for all_greedy, masked in SAMPLING_VARIANTS:
                    sample(slot, b, all_greedy, masked)
        for t in reversed(self.token_buckets):
            for slot in self.slots:
                prefill(slot, t, prefill_rows(t, self.max_rows))
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        pool = None
        for t in reversed(self.token_buckets):  # the largest activations first: one pool for all
            for slot in self.slots:
                graph = self._capture(pool, slot, prefill, t, prefill_rows(t, self.max_rows))
                pool = pool or graph.pool()
                self.prefill_graphs[slot.index][t] = graph
        for b in reversed(self.buckets):
            for slot in self.slots:
                graph = self._capture(pool, slot, decode, b)
                pool = pool or graph.pool()
                self.decode_graphs[slot.index][b] = graph
                for all_greedy, masked in SAMPLING_VARIANTS:
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graph, pool=pool):
                        sample(slot, b, all_greedy, masked)
                        # The last node: when the work ended.
                        slot.ev_graph_sample_end.event.record()
                    self.captures += 1
                    self.sample_graphs[slot.index][(b, all_greedy, masked)] = graph
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        # Every rank of a tensor-parallel engine replays the same graphs in the same order, so the
        # collectives they captured pair up.
        tables: list[dict] = [*self.prefill_graphs, *self.decode_graphs, *self.sample_graphs]
        for table in tables:
            for graph in table.values():
                graph.replay()
        torch.cuda.synchronize()
        self.parts_s = {
            "warmup_s": t1 - t0,
            "capture_s": t2 - t1,
            "replay_s": time.perf_counter() - t2,
        }

    def _capture(
        self, pool, slot: DecodeSlot, body: Callable[..., None], *args: int
    ) -> torch.cuda.CUDAGraph:
        """A forward graph whose first and last nodes record the slot's graph events: when the
        replay's work really started and ended on the GPU."""
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool):
            slot.ev_graph_start.event.record()
            body(slot, *args)
            slot.ev_graph_end.event.record()
        self.captures += 1
        return graph
