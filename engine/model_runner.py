"""ModelRunner: owns the model, the paged KV pool, the two DecodeSlots, the CUDA graphs and the streams.

It turns a launched Step into device work in three calls that mirror the post:
  launch(step)    fill the slot's metadata on the host, one non-blocking upload, enqueue the forward;
  finalize(step)  fill constrained masks from committed state, upload them on the copy stream, enqueue
                  sampling (sampled ids also scattered into the pending-token buffer the next forward reads;
                  a captured graph per bucket and variant, like the forward), then enqueue the device-to-host
                  copy of the ids on the copy stream;
  wait(step)      the host blocks on that copy (the only intended synchronisation) and reads the ids.
"""

from __future__ import annotations

import itertools
import time

import numpy as np
import torch

from bubblelab.engine import sampler
from bubblelab.engine.attention.metadata import AttentionMetadata
from bubblelab.engine.block_manager import BlockManager
from bubblelab.engine.config import EngineConfig
from bubblelab.engine.decode_slot import DecodeSlot
from bubblelab.engine.loader import LoadedModel
from bubblelab.engine.pipeline import NUM_SLOTS, Step
from bubblelab.engine.sampler import SamplingBatch, sample
from bubblelab.engine.streams import Streams
from bubblelab.errors import BubblelabError

# Sampling variants with captured graphs, as (all_greedy, masked): greedy or temperature-only rows, with or without
# a constrained-decoding mask. Batches with top-k / top-p sample eagerly (their sort width is a batch parameter).
SAMPLING_GRAPH_VARIANTS = [(True, False), (True, True), (False, False), (False, True)]


def sampling_variant(flags: tuple[bool, bool, bool, int], masked: bool) -> tuple[bool, bool] | None:
    all_greedy, any_top_k, any_top_p, _ = flags
    return None if any_top_k or any_top_p else (all_greedy, masked)


def graph_buckets(max_rows: int) -> list[int]:
    """Batch sizes with a captured decode graph (a batch runs the smallest bucket that fits), like vLLM's."""
    return sorted(
        {b for b in [1, 2, 4, 8, *range(16, max_rows + 1, 16)] if b <= max_rows} | {max_rows}
    )


class ModelRunner:
    def __init__(self, config: EngineConfig, loaded: LoadedModel, streams: Streams):
        self.config = config
        self.model = loaded.model
        self.model.set_compile(
            config.compile
        )  # compiled lazily: the graph warm-up below triggers it
        self.model_config = loaded.config
        self.device = torch.device(config.device)
        self.streams = streams
        mc = self.model_config
        self.block_size = config.block_size
        self.max_rows = config.max_num_seqs
        self.max_blocks = -(-config.max_model_len // self.block_size)
        self.num_blocks = self._allocate_kv_cache()
        self.scratch_slot = self.num_blocks * self.block_size  # first slot of the scratch page
        # Sampled tokens stay on the device: row r holds the last token of the sequence in batch row r.
        self.pad_row = self.max_rows
        self.pending = torch.zeros(self.max_rows + 1, dtype=torch.int64, device=self.device)
        pin = self.device.type == "cuda"
        self.slots = [
            DecodeSlot(
                i,
                max_rows=self.max_rows,
                max_tokens=config.max_num_batched_tokens,
                max_blocks=self.max_blocks,
                vocab_size=mc.vocab_size,
                logits_dtype=next(self.model.parameters()).dtype,
                device=self.device,
                streams=streams,
                pin=pin,
            )
            for i in range(NUM_SLOTS)
        ]
        for slot in self.slots:
            slot.block_tables_h[:] = (
                self.num_blocks
            )  # every unused entry points at the scratch page
        self.graphs: list[dict[int, torch.cuda.CUDAGraph]] = [{} for _ in self.slots]
        # Per slot: (bucket, all_greedy, masked) -> graph that samples a whole bucket of rows.
        self.sample_graphs: list[dict[tuple[int, bool, bool], torch.cuda.CUDAGraph]] = [
            {} for _ in self.slots
        ]
        self.graph_replays = (
            0  # decode steps that replayed a graph (proof graphs are not silently off)
        )
        self.sample_graph_replays = 0  # the same for sampling
        self.buckets = graph_buckets(self.max_rows)
        if self.device.type == "cuda" and not config.enforce_eager:
            self._capture_graphs()

    # -- set-up --------------------------------------------------------------------------------------
    def _allocate_kv_cache(self) -> int:
        mc, c = self.model_config, self.config
        dtype = next(self.model.parameters()).dtype
        per_block = (
            2 * mc.num_layers * self.block_size * mc.num_kv_heads * mc.head_dim * dtype.itemsize
        )
        wanted = c.max_num_seqs * self.max_blocks  # enough for every sequence at full length
        if c.num_kv_blocks is not None:
            num_blocks = c.num_kv_blocks
        elif self.device.type == "cuda":
            free, total = torch.cuda.mem_get_info(self.device)
            budget = (
                free - (1 - c.gpu_memory_utilization) * total - (2 << 30)
            )  # headroom: slots, graphs, activations
            num_blocks = min(wanted, int(budget // per_block))
        else:
            num_blocks = min(wanted, c.kv_cache_bytes // per_block)
        if num_blocks < self.max_blocks:
            raise BubblelabError(
                f"KV cache of {num_blocks} pages cannot hold one sequence of max_model_len="
                f"{c.max_model_len} ({self.max_blocks} pages); lower max_model_len or raise the budget"
            )
        # One extra page: the scratch page padded graph rows write into.
        self.kv = torch.zeros(
            2,
            mc.num_layers,
            num_blocks + 1,
            self.block_size,
            mc.num_kv_heads,
            mc.head_dim,
            dtype=dtype,
            device=self.device,
        )
        self.activate()
        return num_blocks

    def activate(self) -> None:
        """Point the (possibly shared) model's attention at this runner's KV pool; graphs captured their own."""
        if getattr(self.model, "_bound_kv", None) is not self.kv:
            self.model.bind_kv_cache(list(self.kv[0]), list(self.kv[1]))
            self.model._bound_kv = self.kv

    def _fill_decode_padding(self, slot: DecodeSlot, start: int, end: int) -> None:
        h = slot.meta.np
        h["rows"][start:end] = self.pad_row
        h["positions"][start:end] = 0
        h["slot_mapping"][start:end] = self.scratch_slot
        h["context_lens"][start:end] = 1
        slot.block_tables_h[start:end, 0] = self.num_blocks

    def _capture_graphs(self) -> None:
        pool = None
        for slot in self.slots:
            self._fill_decode_padding(slot, 0, self.max_rows)
            slot.meta.upload(slot.decode_nbytes)
        if (
            self.model.compile_enabled
        ):  # config.compile None means on for CUDA: read the model's resolved flag
            sampler.warmup(
                self.model_config.vocab_size, self.device
            )  # Gumbel-max as one compiled kernel
        torch.cuda.synchronize()
        # Warm every bucket up before capturing any: lazy inits, autotuning and torch.compile's recompiles
        # (static first shape, then dynamic) all settle, so every graph captures the same final kernels.
        for b in reversed(self.buckets):
            for slot in self.slots:
                self._decode_body(slot, b)
                for all_greedy, masked in SAMPLING_GRAPH_VARIANTS:
                    self._sample_body(slot, b, (all_greedy, False, False, 0), masked)
        torch.cuda.synchronize()
        for b in reversed(self.buckets):  # largest first, so smaller graphs reuse its pool memory
            for slot in self.slots:
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool):
                    # A timestamp from inside the graph: when the replay's work really starts on the GPU.
                    slot.ev_graph_start.event.record()
                    self._decode_body(slot, b)
                    slot.ev_graph_end.event.record()
                pool = graph.pool() if pool is None else pool
                self.graphs[slot.index][b] = graph
                for all_greedy, masked in SAMPLING_GRAPH_VARIANTS:
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graph, pool=pool):
                        self._sample_body(slot, b, (all_greedy, False, False, 0), masked)
                        slot.ev_graph_sample_end.event.record()  # the last node: when the work ended
                    self.sample_graphs[slot.index][(b, all_greedy, masked)] = graph
        torch.cuda.synchronize()

    # -- device work (enqueued on the compute stream) ------------------------------------------------
    def _decode_body(self, slot: DecodeSlot, b: int) -> None:
        d = slot.meta.d
        meta = AttentionMetadata(
            is_prefill=False,
            slot_mapping=d["slot_mapping"][:b],
            context_lens=d["context_lens"][:b],
            block_tables=slot.block_tables_d[:b],
        )
        hidden = self.model(self.pending[d["rows"][:b]], d["positions"][:b], meta)
        slot.logits[:b].copy_(self.model.compute_logits(hidden))

    def _prefill_body(self, slot: DecodeSlot, lens: list[int]) -> None:
        d, n_tokens, n_seqs = slot.meta.d, sum(lens), len(lens)
        meta = AttentionMetadata(
            is_prefill=True,
            slot_mapping=d["p_slot_mapping"][:n_tokens],
            cu_seqlens=d["p_cu_seqlens"][: n_seqs + 1],
            max_seqlen=max(lens),
            seq_lens=lens,
        )
        hidden = self.model(d["p_input_ids"][:n_tokens], d["p_positions"][:n_tokens], meta)
        slot.logits[:n_seqs].copy_(self.model.compute_logits(hidden[d["p_last_index"][:n_seqs]]))

    def _sample_body(
        self, slot: DecodeSlot, n: int, flags: tuple[bool, bool, bool, int], masked: bool
    ) -> None:
        """Samples rows [0, n); everything it reads is on the device, so a graph can capture it per bucket."""
        d = slot.meta.d
        batch = SamplingBatch(
            d["temperature"][:n],
            d["top_k"][:n],
            d["top_p"][:n],
            d["seed"][:n],
            d["counter"][:n],
            *flags,
        )
        ids = sample(slot.logits[:n], batch, slot.mask_dev[:n] if masked else None)
        slot.sampled[:1].copy_(d["step_id"])  # the tag commit checks (I6)
        slot.sampled[1 : n + 1].copy_(ids)
        self.pending.index_copy_(
            0, d["rows"][:n], ids
        )  # the next forward reads its input from here

    # -- the three phases ----------------------------------------------------------------------------
    def launch(self, step: Step, blocks: BlockManager, phases) -> None:
        slot = self.slots[step.slot]
        seqs, n = step.seqs, len(step.seqs)
        h = slot.meta.np
        h["rows"][:n] = [s.row for s in seqs]
        h["rows"][n:] = (
            self.pad_row
        )  # rows a bucket-sized graph samples past the batch land in the pad row
        self._fill_sampling(slot, step)
        if step.kind == "decode":
            sampled_pos = [s.num_launched - 1 for s in seqs]
            h["positions"][:n] = [p - 1 for p in sampled_pos]
            h["context_lens"][:n] = sampled_pos
            h["slot_mapping"][:n] = [blocks.slot(s, p - 1) for s, p in zip(seqs, sampled_pos)]
            bt = slot.block_tables_h
            for i, s in enumerate(seqs):
                bt[i, : len(s.block_table)] = s.block_table
            graph = self.graphs[slot.index]
            bucket = next((b for b in self.buckets if b >= n), None) if graph else None
            if bucket is not None:
                self._fill_decode_padding(slot, n, bucket)
            nbytes, rng = slot.decode_nbytes, "forward"
        else:
            lens = [s.num_tokens for s in seqs]
            cu = np.cumsum([0, *lens])
            total = int(cu[-1])
            # Vectorised over the whole batch: per-sequence numpy calls cost ~5 us each, 0.6 ms at 128 prompts.
            h["p_input_ids"][:total] = np.fromiter(
                itertools.chain.from_iterable(s.token_ids for s in seqs), np.int64, total
            )
            pos = np.arange(total) - np.repeat(cu[:-1], lens)
            h["p_positions"][:total] = pos
            tables = np.fromiter(
                itertools.chain.from_iterable(s.block_table for s in seqs), np.int64
            )
            first_page = np.repeat(np.cumsum([0, *(len(s.block_table) for s in seqs[:-1])]), lens)
            h["p_slot_mapping"][:total] = (
                tables[first_page + pos // self.block_size] * self.block_size
                + pos % self.block_size
            )
            h["p_cu_seqlens"][: n + 1] = cu
            h["p_last_index"][:n] = cu[1:] - 1
            nbytes, rng = slot.meta.nbytes, "prefill"
        compute = self.streams.compute
        compute.record(slot.ev_forward_start)
        with phases.range("copy_h2d", step.step_id):
            compute.submit(lambda: slot.meta.upload(nbytes))
        with phases.range(rng, step.step_id):
            if step.kind == "decode":
                if bucket is not None:
                    self.graph_replays += 1
                    compute.submit(self.graphs[slot.index][bucket].replay)
                    step.info["forward_launched_ns"] = time.perf_counter_ns()
                else:
                    compute.submit(lambda: self._decode_body(slot, n))
            else:
                compute.submit(lambda: self._prefill_body(slot, lens))
        step.info["graph"] = step.kind == "decode" and bucket is not None
        compute.record(slot.ev_forward_end)

    def _fill_sampling(self, slot: DecodeSlot, step: Step) -> None:
        h, seqs, n = slot.meta.np, step.seqs, len(step.seqs)
        params = [s.params for s in seqs]
        h["temperature"][:n] = [p.temperature for p in params]
        h["top_k"][:n] = [p.top_k for p in params]
        h["top_p"][:n] = [p.top_p for p in params]
        h["seed"][:n] = [s.seed for s in seqs]
        h["counter"][:n] = [s.num_launched - 1 - s.num_prompt_tokens for s in seqs]
        h["step_id"][0] = step.step_id
        # Host-side facts the sampler branches on, so it never reads device data to decide.
        step.info["flags"] = (
            all(p.temperature == 0 for p in params),
            any(p.top_k > 0 for p in params),
            any(p.top_p < 1.0 for p in params),
            max(p.top_k for p in params),
        )

    def finalize(self, step: Step, phases) -> None:
        slot, n = self.slots[step.slot], len(step.seqs)
        compute, copy = self.streams.compute, self.streams.copy
        masked = any(s.constraint is not None for s in step.seqs)
        if masked:
            with phases.range("mask", step.step_id):
                for i, s in enumerate(step.seqs):
                    if s.constraint is None or s.finalized:
                        slot.mask_np[i] = -1  # plain rows and zombies sample unmasked
                    else:
                        s.constraint.fill_bitmask(
                            slot.mask_np[i], s.params.max_tokens - s.num_generated
                        )
                # Upload on the copy stream; sampling waits on an event, never on the host.
                copy.submit(lambda: slot.mask_dev[:n].copy_(slot.mask_host[:n], non_blocking=True))
                copy.record(slot.ev_mask_ready)
                compute.wait(slot.ev_mask_ready)
        flags, graphs = step.info["flags"], self.sample_graphs[slot.index]
        variant = sampling_variant(flags, masked)
        bucket = next((b for b in self.buckets if b >= n), None) if graphs and variant else None
        step.info["sample_graph"] = bucket is not None
        with phases.range("sampling", step.step_id):
            step.info["sampling_launched_ns"] = time.perf_counter_ns()
            if bucket is not None:
                self.sample_graph_replays += 1
                compute.submit(graphs[(bucket, *variant)].replay)
            else:
                compute.submit(lambda: self._sample_body(slot, n, flags, masked))
            compute.record(slot.ev_done)
        with phases.range("copy_d2h", step.step_id):
            copy.wait(
                slot.ev_done
            )  # anchored to exactly this step's outputs, nothing queued behind them
            copy.submit(
                lambda: slot.sampled_host[: n + 1].copy_(slot.sampled[: n + 1], non_blocking=True)
            )
            copy.record(slot.ev_copied)

    def wait(self, step: Step) -> list[int]:
        slot, n = self.slots[step.slot], len(step.seqs)
        slot.ev_copied.synchronize()
        return slot.read_sampled(n, step.step_id)

    def device_times(self, step: Step) -> tuple[tuple[int, int], tuple[int, int]]:
        """(forward start, end) and (sampling start, end) of a committed step, in host perf_counter ns."""
        s = self.slots[step.slot]
        # On an idle stream ev_forward_start fires at once, before the host has even launched the graph; the
        # graph's own first node says when its work started (so launch latency is bubble, not forward). That
        # node can run while the host is still inside the launch call (under nsys's node tracing a call takes
        # ~0.3 ms and the kernels start only as it returns), so the forward starts no earlier than the return.
        graph = step.info.get("graph")
        start = (
            max(s.ev_graph_start.time_ns(), step.info["forward_launched_ns"])
            if graph
            else s.ev_forward_start.time_ns()
        )
        forward_end = (s.ev_graph_end if graph else s.ev_forward_end).time_ns()
        # Sampling starts when the GPU could start it: when the forward ended, or when the host launched it if
        # that was later. Getting it going on the GPU (graph launch, the event between the two) is sampling's
        # cost, not bubble; nsys spans read the same way (step_spans.sql). Events bracketing ~20 us of kernels
        # would instead add ~1-3 us of their own.
        sampling_start = max(forward_end, step.info["sampling_launched_ns"])
        end = (s.ev_graph_sample_end if step.info.get("sample_graph") else s.ev_done).time_ns()
        return (start, forward_end), (sampling_start, end)

    def close(self) -> None:
        self.streams.synchronize()
