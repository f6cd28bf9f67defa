"""ModelRunner: the device side of a step. It owns the model, the paged KV pool, the two
DecodeSlots, the CUDA graphs and the streams, and turns a launched Step into device work in three
calls that mirror the post:

  launch(step)    fill the slot's inputs on the host, one non-blocking upload, enqueue the forward
                  (a captured graph per decode bucket or prefill token bucket, else eagerly);
  finalize(step)  fill constrained masks from committed state, upload them on the copy stream,
                  enqueue sampling (sampled ids also scattered into the pending-token buffer the
                  next forward reads; a captured graph per bucket and variant), then enqueue the
                  device-to-host copy of the ids on the copy stream;
  wait(step)      the host blocks on that copy (the only intended synchronisation), reads the ids.
"""

from __future__ import annotations

import time

import torch

from ..core.block_manager import BlockManager
from ..core.errors import InvariantError
from ..core.pipeline import NUM_SLOTS, Step, StepKind
from . import pdl, sampler
from .attention.metadata import AttentionMetadata
from .config import EngineConfig
from .cuda_graphs import CudaGraphs, prefill_rows
from .decode_slot import DecodeSlot, LaunchRecord
from .kv_cache import allocate_kv_pool
from .loader import LoadedModel
from .phases import Phases
from .sampler import SamplingBatch, SamplingFlags, sample
from .start import share_triton_cache
from .streams import Streams


def sampling_variant(flags: SamplingFlags, masked: bool) -> tuple[bool, bool] | None:
    """(all_greedy, masked) of a batch a sampling graph can serve; None for top-k / top-p."""
    return None if flags.any_top_k or flags.any_top_p else (flags.all_greedy, masked)


class ModelRunner:
    def __init__(self, config: EngineConfig, loaded: LoadedModel, streams: Streams):
        self.config = config
        self.device = torch.device(config.device)
        if self.device.type == "cuda":  # before any kernel is built (engine.start)
            share_triton_cache(self.device.index or 0)
        self.model = loaded.model
        self.model.set_compile(config.compile)  # compiled lazily: the graph warm-up triggers it
        self.model_config = mc = loaded.config
        self.streams = streams
        dtype = next(self.model.parameters()).dtype
        self.kv = allocate_kv_pool(config, mc, dtype, self.device, self.model.tp)
        self.num_blocks = self.kv.shape[2] - 1  # the last page is the scratch page
        self.activate()
        self.max_rows = config.max_num_seqs
        # Sampled tokens stay on the device: row r holds the last token of the sequence in batch
        # row r; the extra row takes what padded graph rows sample.
        self.pending = torch.zeros(self.max_rows + 1, dtype=torch.int64, device=self.device)
        pin = self.device.type == "cuda"
        self.slots = [
            DecodeSlot(
                i,
                max_rows=self.max_rows,
                # A single prompt may exceed the batch's token budget (it is admitted alone).
                max_tokens=max(config.max_num_batched_tokens, config.max_model_len),
                max_blocks=-(-config.max_model_len // config.block_size),
                vocab_size=mc.vocab_size,
                logits_dtype=dtype,
                device=self.device,
                streams=streams,
                pin=pin,
                pad_row=self.max_rows,
                scratch_page=self.num_blocks,
                block_size=config.block_size,
            )
            for i in range(NUM_SLOTS)
        ]
        # Prefill graphs need a prefill kernel that reads sequence lengths on the device only.
        static_prefill = getattr(self.model.attn_backend, "static_prefill", False)
        self.graphs = CudaGraphs(
            self.slots, self.max_rows, config.max_num_batched_tokens, prefill=static_prefill
        )
        # Every forward and sampling shape run so far (forward_shape, sampling_shape): a shape's
        # first run may allocate, autotune or compile, so a timed run should meet none for the
        # first time (runs.warmup runs them before it, runs.region counts the new ones).
        self.shapes: set[tuple] = set()
        if self.device.type == "cuda" and not config.enforce_eager:
            self._capture_graphs()

    def activate(self) -> None:
        """Points the (possibly shared) model's attention at this runner's KV pool (graphs captured
        their own)."""
        if getattr(self.model, "_bound_kv", None) is not self.kv:
            self.model.bind_kv_cache(list(self.kv[0]), list(self.kv[1]))
            self.model._bound_kv = self.kv

    def _capture_graphs(self) -> None:
        for slot in self.slots:  # valid padding everywhere: warm-up and capture read whole buckets
            slot.pad_decode(0, self.max_rows)
            slot.meta.np["p_cu_seqlens"][0] = 0
            slot.pad_prefill(0, 0, slot.max_tokens, self.max_rows)
            slot.meta.upload(slot.meta.nbytes)
        t0 = time.perf_counter()
        if self.model.compile_enabled:  # config.compile None means on for CUDA: the resolved flag
            sampler.warmup(self.model_config.vocab_size, self.device)  # Gumbel-max, one kernel
        torch.cuda.synchronize()
        sampler_s = time.perf_counter() - t0
        self.graphs.capture(self._decode_body, self._graph_sample_body, self._prefill_body)
        self.graphs.parts_s["sampler_warmup_s"] = sampler_s

    # -- device work (enqueued on the compute stream) ----------------------------------------------
    def _decode_body(self, slot: DecodeSlot, rows: int) -> None:
        d = slot.meta.d
        meta = AttentionMetadata(
            is_prefill=False,
            slot_mapping=d["slot_mapping"][:rows],
            context_lens=d["context_lens"][:rows],
            block_tables=slot.block_tables_d[:rows],
        )
        with pdl.step_rows(rows):
            hidden = self.model(self.pending[d["rows"][:rows]], d["positions"][:rows], meta)
            self.model.compute_logits(hidden, out=slot.logits[:rows])

    def _prefill_body(
        self, slot: DecodeSlot, tokens: int, rows: int, lens: list[int] | None = None
    ) -> None:
        """The forward over `tokens` flat tokens of `rows` sequences, logits of each one's last
        token. lens: the sequences' lengths on the host (an eager prefill of exactly the batch);
        None for a graph's static shape, where the attention kernel reads the lengths from
        cu_seqlens on the device."""
        d = slot.meta.d
        meta = AttentionMetadata(
            is_prefill=True,
            slot_mapping=d["p_slot_mapping"][:tokens],
            cu_seqlens=d["p_cu_seqlens"][: rows + 1],
            max_seqlen=max(lens) if lens else tokens,
            seq_lens=lens,
        )
        with pdl.step_rows(tokens):
            hidden = self.model(d["p_input_ids"][:tokens], d["p_positions"][:tokens], meta)
            last = hidden[d["p_last_index"][:rows]]
            self.model.compute_logits(last, out=slot.logits[:rows])

    def _sample_body(self, slot: DecodeSlot, n: int, flags: SamplingFlags, masked: bool) -> None:
        """Samples rows [0, n); what it reads is all on the device, so a graph per bucket can
        capture it."""
        d = slot.meta.d
        batch = SamplingBatch(
            d["temperature"][:n], d["top_k"][:n], d["top_p"][:n], d["seed"][:n], d["counter"][:n],
            *flags,
        )  # fmt: skip
        ids = sample(slot.logits[:n], batch, slot.mask_dev[:n] if masked else None)
        slot.sampled[:1].copy_(d["step_id"])  # the tag commit checks (I6)
        slot.sampled[1 : n + 1].copy_(ids)
        self.pending.index_copy_(0, d["rows"][:n], ids)  # the next forward reads its input here

    def _graph_sample_body(self, slot: DecodeSlot, n: int, all_greedy: bool, masked: bool) -> None:
        self._sample_body(slot, n, SamplingFlags(all_greedy, False, False), masked)

    def eager_decode(self, slot: DecodeSlot, rows: int) -> None:
        """The decode forward over `slot`'s first `rows` rows, launched eagerly: the work a decode
        graph captures. For benchmarks that time it or count its kernels against the graph's."""
        self._decode_body(slot, rows)

    # -- shapes ------------------------------------------------------------------------------------
    def forward_shape(self, kind: StepKind, rows: int, tokens: int, longest: int = 1) -> tuple:
        """What a forward of `rows` sequences (`tokens` in all, the longest prompt `longest`) runs:
        its captured graph's bucket, else the eager shape (an eager prefill's attention kernel is
        sized by its longest sequence too)."""
        if kind is StepKind.DECODE:
            bucket = self.graphs.decode_bucket(rows)
            return ("decode", "graph", bucket) if bucket is not None else ("decode", rows)
        bucket = self.graphs.prefill_bucket(tokens)
        if bucket is not None:
            return ("prefill", "graph", bucket)
        return ("prefill", tokens, rows, longest)

    def sampling_shape(self, rows: int, flags: SamplingFlags, masked: bool) -> tuple:
        """What sampling `rows` rows runs: a captured graph (bucket and variant), else eagerly."""
        variant = sampling_variant(flags, masked)
        bucket = self.graphs.sample_bucket(rows, variant)
        if bucket is not None:
            return ("sample", "graph", bucket, variant)
        return ("sample", rows, tuple(flags), masked)

    # -- the three phases --------------------------------------------------------------------------
    def launch(self, step: Step, blocks: BlockManager, phases: Phases) -> None:
        slot = self.slots[step.slot]
        record = self.fill_launch(step, slot, blocks)
        self.forward_on_every_rank(slot, record, phases)

    def finalize(self, step: Step, phases: Phases) -> None:
        slot, n = self.slots[step.slot], len(step.seqs)
        record = slot.record
        if record is None or record.step_id != step.step_id:
            raise InvariantError(2, f"slot {slot.index} holds the record of another step")
        masked = any(s.constraint is not None for s in step.seqs)
        if masked:
            with phases.range("mask", step.step_id):
                slot.fill_mask(step.seqs)
                self.enqueue_mask(slot, n)
        self.sample_on_every_rank(slot, record, masked, phases)

    # -- a step's device halves on every rank (TPModelRunner hands each to its workers first) -----
    def forward_on_every_rank(self, slot: DecodeSlot, record: LaunchRecord, phases: Phases) -> None:
        self.enqueue_forward(slot, record, phases)

    def sample_on_every_rank(
        self, slot: DecodeSlot, record: LaunchRecord, masked: bool, phases: Phases
    ) -> None:
        self.enqueue_sampling(slot, record, masked, phases)

    def drain(self) -> None:
        """Block until this rank's queued device work has run."""
        self.streams.synchronize()

    # -- their host and device halves (tensor-parallel workers run the device halves) --------------
    def fill_launch(self, step: Step, slot: DecodeSlot, blocks: BlockManager) -> LaunchRecord:
        """Host half of a launch: the slot's packed inputs, and which forward runs (graph bucket or
        eager)."""
        seqs, n = step.seqs, len(step.seqs)
        flags = slot.fill_sampling(seqs, step.step_id)
        record = slot.record = LaunchRecord(step.step_id, step.kind, n, flags)
        if step.kind is StepKind.DECODE:
            self.shapes.add(self.forward_shape(step.kind, n, n))
            record.bucket = self.graphs.decode_bucket(n)
            slot.fill_decode(seqs, blocks, record.bucket)
            record.nbytes = slot.decode_nbytes
        else:
            lens = [s.num_tokens for s in seqs]
            record.tokens = sum(lens)
            self.shapes.add(self.forward_shape(step.kind, n, record.tokens, max(lens)))
            record.bucket = self.graphs.prefill_bucket(record.tokens)
            if record.bucket is not None:
                slot.fill_prefill(seqs, record.bucket, prefill_rows(record.bucket, self.max_rows))
            else:
                slot.fill_prefill(seqs, record.tokens, n)
                record.lens = lens
            record.nbytes = slot.meta.nbytes
        return record

    def enqueue_forward(self, slot: DecodeSlot, record: LaunchRecord, phases: Phases) -> None:
        """Device half of a launch: the one packed upload, then the forward (graph or eager)."""
        bucket, n = record.bucket, record.rows
        if record.kind is StepKind.DECODE:
            phase = "forward"
            if bucket is not None:
                forward = lambda: self.graphs.replay_decode(slot, bucket)  # noqa: E731
            else:
                forward = lambda: self._decode_body(slot, n)  # noqa: E731
        else:
            phase = "prefill"
            if bucket is not None:
                forward = lambda: self.graphs.replay_prefill(slot, bucket)  # noqa: E731
            else:
                tokens, lens = record.tokens, record.lens
                forward = lambda: self._prefill_body(slot, tokens, n, lens)  # noqa: E731
        record.forward_graph = bucket is not None
        compute = self.streams.compute
        compute.record(slot.ev_forward_start)
        with phases.range("copy_h2d", record.step_id):
            compute.submit(lambda: slot.meta.upload(record.nbytes))
        with phases.range(phase, record.step_id):
            compute.submit(forward)
            record.forward_launched_ns = time.perf_counter_ns()
        compute.record(slot.ev_forward_end)

    def enqueue_mask(self, slot: DecodeSlot, n: int) -> None:
        """Upload the filled bitmask rows on the copy stream; sampling waits on an event, never on
        the host."""
        copy = self.streams.copy
        copy.submit(lambda: slot.mask_dev[:n].copy_(slot.mask_host[:n], non_blocking=True))
        copy.record(slot.ev_mask_ready)
        self.streams.compute.wait(slot.ev_mask_ready)

    def enqueue_sampling(
        self,
        slot: DecodeSlot,
        record: LaunchRecord,
        masked: bool,
        phases: Phases,
        copy_back: bool = True,
    ) -> None:
        """Sampling on the compute stream; then (copy_back: rank 0) the sampled ids to the host on
        the copy stream, anchored to exactly this step's outputs."""
        n, compute, copy = record.rows, self.streams.compute, self.streams.copy
        variant = sampling_variant(record.flags, masked)
        bucket = self.graphs.sample_bucket(n, variant)
        record.sample_graph = bucket is not None
        self.shapes.add(self.sampling_shape(n, record.flags, masked))
        with phases.range("sampling", record.step_id):
            record.sampling_launched_ns = time.perf_counter_ns()
            if bucket is not None and variant is not None:
                compute.submit(lambda: self.graphs.replay_sampling(slot, bucket, variant))
            else:
                compute.submit(lambda: self._sample_body(slot, n, record.flags, masked))
            compute.record(slot.ev_done)
        if not copy_back:
            return
        with phases.range("copy_d2h", record.step_id):
            copy.wait(slot.ev_done)  # nothing queued behind this step's sampling delays the copy
            copy.submit(
                lambda: slot.sampled_host[: n + 1].copy_(slot.sampled[: n + 1], non_blocking=True)
            )
            copy.record(slot.ev_copied)

    def wait(self, step: Step) -> list[int]:
        slot = self.slots[step.slot]
        self.streams.wait(slot.ev_copied)
        return slot.read_sampled(len(step.seqs), step.step_id)

    def device_times(self, step: Step, profiled: bool) -> tuple[tuple[int, int], tuple[int, int]]:
        """(forward start, end) and (sampling start, end) of a committed step, in host
        perf_counter ns."""
        return self.slots[step.slot].device_times(profiled)

    def close(self) -> None:
        self.streams.synchronize()
