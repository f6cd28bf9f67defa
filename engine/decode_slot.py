"""DecodeSlot: one step's preallocated working set. Two of them are used ping-pong.

Everything a step needs lives here at a fixed address (CUDA graphs replay over these buffers): the
packed per-step metadata (host staging buffer + device copy, uploaded in ONE non-blocking copy), the
logits, the sampled ids and their host landing buffer, the constrained-decoding bitmask, and the
events that order them. A slot is reacquired only after the commit that read its host buffers
(pipeline invariant I6). Each copy lands the step id ahead of the sampled ids (a tag); commit checks
it, so a host buffer overwritten by a later step before its commit is caught, never silently read.

The slot also fills its own inputs (`fill_decode`, `fill_prefill`, `fill_sampling`: host work,
vectorised where it scales with the batch), keeps a `LaunchRecord` of what the runner did for the
step that holds it, and turns its events into the step's device times (`device_times`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import torch

from ..core.block_manager import BlockManager
from ..core.errors import InvariantError
from ..core.pipeline import StepKind
from ..core.sequence import Sequence
from .sampler import SamplingFlags


@dataclass(frozen=True)
class Field:
    name: str
    dtype: torch.dtype
    numel: int


class PackedBuffer:
    """Named typed views over one byte buffer on the host and its twin on the device."""

    def __init__(self, fields: list[Field], device: torch.device, pin: bool):
        self.offsets: dict[str, tuple[int, Field]] = {}
        offset = 0
        for f in fields:
            size = f.dtype.itemsize
            offset = -(-offset // 8) * 8  # 8-byte alignment keeps every typed view legal
            self.offsets[f.name] = (offset, f)
            offset += f.numel * size
        self.nbytes = -(-offset // 8) * 8
        self.host = torch.zeros(self.nbytes, dtype=torch.uint8, pin_memory=pin)
        self.dev = torch.zeros(self.nbytes, dtype=torch.uint8, device=device)
        self.h = {n: self._view(self.host, n) for n in self.offsets}
        self.d = {n: self._view(self.dev, n) for n in self.offsets}
        self.np = {n: v.numpy() for n, v in self.h.items()}

    def _view(self, buf: torch.Tensor, name: str) -> torch.Tensor:
        offset, f = self.offsets[name]
        return buf[offset : offset + f.numel * f.dtype.itemsize].view(f.dtype)

    def end_of(self, name: str) -> int:
        offset, f = self.offsets[name]
        return offset + f.numel * f.dtype.itemsize

    def upload(self, nbytes: int) -> None:
        """Enqueue on the current stream the step's one packed host-to-device copy of metadata."""
        self.dev[:nbytes].copy_(self.host[:nbytes], non_blocking=True)


@dataclass
class LaunchRecord:
    """What the runner did for the step holding the slot, read back at finalize and at commit."""

    step_id: int
    kind: StepKind
    rows: int
    flags: SamplingFlags
    bucket: int | None = None  # the captured graph's rows (decode) or tokens (prefill); None: eager
    nbytes: int = 0  # the packed inputs' upload size
    tokens: int = 0  # a prefill's tokens
    lens: list[int] | None = None  # an eager prefill's sequence lengths, on the host
    forward_graph: bool = False  # the forward replayed a captured graph
    forward_launched_ns: int = 0  # host clock when that replay call returned
    sample_graph: bool = False
    sampling_launched_ns: int = 0


class DecodeSlot:
    def __init__(
        self,
        index: int,
        *,
        max_rows: int,
        max_tokens: int,
        max_blocks: int,
        vocab_size: int,
        logits_dtype: torch.dtype,
        device: torch.device,
        streams,
        pin: bool,
        pad_row: int,
        scratch_page: int,
        block_size: int,
    ):
        self.index = index
        self.max_rows, self.max_tokens = R, T = max_rows, max_tokens
        # Decode and sampling fields first, so a decode step uploads only that prefix; prefill last.
        self.meta = PackedBuffer(
            [
                Field("rows", torch.int64, R),  # batch row of each sequence (pending-token index)
                Field("positions", torch.int64, R),
                Field("slot_mapping", torch.int64, R),
                Field("context_lens", torch.int32, R),
                Field("block_tables", torch.int32, R * max_blocks),
                Field("temperature", torch.float32, R),
                Field("top_k", torch.int32, R),
                Field("top_p", torch.float32, R),
                Field("seed", torch.int32, R),
                Field("counter", torch.int32, R),
                Field("step_id", torch.int64, 1),  # the tag sampling writes ahead of the ids (I6)
                Field("p_input_ids", torch.int64, T),  # prefill only from here on
                Field("p_positions", torch.int64, T),
                Field("p_slot_mapping", torch.int64, T),
                Field("p_cu_seqlens", torch.int32, R + 1),
                Field("p_last_index", torch.int64, R),
            ],
            device,
            pin,
        )
        self.decode_nbytes = self.meta.end_of("step_id")
        self.max_blocks = max_blocks
        self.block_tables_h = self.meta.np["block_tables"].reshape(R, max_blocks)
        self.block_tables_d = self.meta.d["block_tables"].view(R, max_blocks)
        self.words = (vocab_size + 31) // 32
        self.logits = torch.zeros(R, vocab_size, dtype=logits_dtype, device=device)
        # The step id tag, then the sampled ids of the step's rows (a sampling graph writes a whole
        # bucket of rows; the tag comes first so padded rows never overwrite it).
        self.sampled = torch.zeros(R + 1, dtype=torch.int64, device=device)
        self.sampled_host = torch.full((R + 1,), -1, dtype=torch.int64, pin_memory=pin)
        self.mask_host = torch.zeros(R, self.words, dtype=torch.int32, pin_memory=pin)
        self.mask_dev = torch.zeros(R, self.words, dtype=torch.int32, device=device)
        self.mask_np = self.mask_host.numpy()
        # Events: forward start/end and sampling end on the compute stream, mask upload and result
        # copy on the copy stream. Re-recorded every time the slot is reused.
        self.ev_forward_start = streams.event()
        self.ev_graph_start = streams.event(external=True)  # by the decode graph's first node
        self.ev_graph_end = streams.event(external=True)  # and by its last
        self.ev_forward_end = streams.event()
        self.ev_graph_sample_end = streams.event(external=True)  # the last node of a sampling graph
        self.ev_done = streams.event()  # the step's outputs (sampled ids, pending tokens) written
        self.ev_mask_ready = streams.event()
        self.ev_copied = streams.event()  # sampled ids have landed in sampled_host

        self.record: LaunchRecord | None = None
        # Padding: rows past the batch sample into the pad row and write K/V into the scratch page.
        self.pad_row, self.scratch_page, self.block_size = pad_row, scratch_page, block_size
        self.block_tables_h[:] = scratch_page  # every unused table entry points at the scratch page
        self._tables: list[list[int] | None] = [None] * max_rows  # each row's table as last written

    # -- host-side inputs --------------------------------------------------------------------------
    def fill_sampling(self, seqs: list[Sequence], step_id: int) -> SamplingFlags:
        """Per-row sampling parameters, the step id tag, and host facts the sampler branches on."""
        h, n = self.meta.np, len(seqs)
        params = [s.params for s in seqs]
        h["rows"][:n] = [s.row for s in seqs]
        h["rows"][n:] = self.pad_row  # rows a bucket-sized graph samples past the batch
        h["temperature"][:n] = [p.temperature for p in params]
        h["top_k"][:n] = [p.top_k for p in params]
        h["top_p"][:n] = [p.top_p for p in params]
        h["seed"][:n] = [s.seed for s in seqs]
        h["counter"][:n] = [s.num_launched - 1 - s.num_prompt_tokens for s in seqs]
        h["step_id"][0] = step_id
        return SamplingFlags.of(params)

    def fill_decode(self, seqs: list[Sequence], blocks: BlockManager, bucket: int | None) -> None:
        """Positions, KV slots, context lengths and page tables of a decode step; rows past the
        batch up to `bucket` (a captured graph's size) point at the pad row and the scratch page."""
        h, n = self.meta.np, len(seqs)
        sampled_pos = [s.num_launched - 1 for s in seqs]
        h["positions"][:n] = [p - 1 for p in sampled_pos]
        h["context_lens"][:n] = sampled_pos
        h["slot_mapping"][:n] = [
            blocks.slot(s, p - 1) for s, p in zip(seqs, sampled_pos, strict=True)
        ]
        tables = self._tables
        # Rewrite only the rows whose table changed (~1 us each otherwise).
        for i, s in enumerate(seqs):
            if tables[i] != s.block_table:
                self.block_tables_h[i, : len(s.block_table)] = s.block_table
                tables[i] = list(s.block_table)
        if bucket is not None:
            self.pad_decode(n, bucket)

    def fill_mask(self, seqs: list[Sequence]) -> None:
        """Constrained-decoding bitmask rows from committed state (commit-before-finalize)."""
        for i, s in enumerate(seqs):
            if s.constraint is None or s.finalized:
                self.mask_np[i] = -1  # plain rows and zombies sample unmasked
            else:
                s.constraint.fill_bitmask(self.mask_np[i], s.params.max_tokens - s.num_generated)

    def pad_decode(self, start: int, end: int) -> None:
        h = self.meta.np
        h["rows"][start:end] = self.pad_row
        h["positions"][start:end] = 0
        h["slot_mapping"][start:end] = self.scratch_page * self.block_size
        h["context_lens"][start:end] = 1
        self.block_tables_h[start:end, 0] = self.scratch_page
        self._tables[start:end] = [None] * (end - start)

    def fill_prefill(self, seqs: list[Sequence], tokens: int, rows: int) -> None:
        """Flat token ids, positions and KV slots of a prefill, with cu_seqlens and each sequence's
        last token. Vectorised over the batch (per-sequence numpy calls cost ~5 us each, 0.6 ms at
        128 prompts). `tokens` x `rows` is the shape the forward runs at: a captured graph's bucket
        (padding tokens write into the scratch page, padding rows are empty), or just the batch."""
        h, n = self.meta.np, len(seqs)
        lens = [s.num_tokens for s in seqs]
        cu = np.cumsum([0, *lens])
        total = int(cu[-1])
        h["p_input_ids"][:total] = np.fromiter(
            itertools.chain.from_iterable(s.token_ids for s in seqs), np.int64, total
        )
        pos = np.arange(total) - np.repeat(cu[:-1], lens)
        h["p_positions"][:total] = pos
        tables = np.fromiter(itertools.chain.from_iterable(s.block_table for s in seqs), np.int64)
        first_page = np.repeat(np.cumsum([0, *(len(s.block_table) for s in seqs[:-1])]), lens)
        page = tables[first_page + pos // self.block_size]
        h["p_slot_mapping"][:total] = page * self.block_size + pos % self.block_size
        h["p_cu_seqlens"][: n + 1] = cu
        h["p_last_index"][:n] = cu[1:] - 1
        self.pad_prefill(total, n, tokens, rows)

    def pad_prefill(self, total: int, n: int, tokens: int, rows: int) -> None:
        """Pads tokens [total, tokens) and rows [n, rows): empty rows, K/V into the scratch page."""
        h = self.meta.np
        h["p_input_ids"][total:tokens] = 0
        h["p_positions"][total:tokens] = 0
        h["p_slot_mapping"][total:tokens] = self.scratch_page * self.block_size
        h["p_cu_seqlens"][n + 1 : rows + 1] = total
        h["p_last_index"][n:rows] = 0

    # -- results -----------------------------------------------------------------------------------
    def read_sampled(self, n: int, step_id: int) -> list[int]:
        """The n sampled ids of `step_id` once its copy landed; refuses a buffer a later step
        overwrote (I6)."""
        values = self.sampled_host[: n + 1].tolist()
        if values[0] != step_id:
            raise InvariantError(
                6,
                f"slot {self.index} host buffer holds step {values[0]}, "
                f"not step {step_id}: overwritten before its commit",
            )
        return values[1:]

    def device_times(self, profiled: bool) -> tuple[tuple[int, int], tuple[int, int]]:
        """(forward start, end) and (sampling start, end) of the step holding the slot, in host
        perf_counter ns, once its commit has waited for it. `profiled`: under nsys (see below)."""
        r = self.record
        assert r is not None
        # On an idle stream ev_forward_start fires at once, before the host has even launched the
        # graph; the graph's own first node says when its work started (so launch latency is bubble,
        # not forward). Under nsys's node-level graph tracing that first node runs ~0.3 ms before
        # the kernels, which start only as the launch call returns: there (and only there) the
        # forward starts no earlier than the return, as profiling/sql/step_spans.sql reads nsys
        # traces. Unprofiled, the kernels may start before a long launch call returns, and clamping
        # would cut real forward time at depth 1.
        if r.forward_graph:
            start = self.ev_graph_start.time_ns()
            if profiled:
                start = max(start, r.forward_launched_ns)
            forward_end = self.ev_graph_end.time_ns()
        else:
            start, forward_end = self.ev_forward_start.time_ns(), self.ev_forward_end.time_ns()
        # Sampling starts when the GPU could start it: when the forward ended, or when the host
        # launched it if that was later. Getting it going on the GPU (graph launch, the event
        # between the two) is sampling's cost, not bubble; nsys spans read the same way
        # (step_spans.sql). Events bracketing ~20 us of kernels would add ~1-3 us of their own.
        sampling_start = max(forward_end, r.sampling_launched_ns)
        end = (self.ev_graph_sample_end if r.sample_graph else self.ev_done).time_ns()
        return (start, forward_end), (sampling_start, end)
