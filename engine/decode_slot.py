"""DecodeSlot: one step's preallocated working set. Two of them are used ping-pong.

Everything a step needs lives here at a fixed address (CUDA graphs replay over these buffers): the packed
per-step metadata (host staging buffer + device copy, uploaded in ONE non-blocking copy), the logits, the
sampled ids and their host landing buffer, the constrained-decoding bitmask, and the events that order them.
A slot is reacquired only after the commit that read its host buffers (pipeline invariant I6). Each copy
lands the step id ahead of the sampled ids (a tag); commit checks it, so a host buffer overwritten by a later
step before its commit is caught, never silently read.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


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
        """Enqueue on the current stream: the one packed host-to-device copy of this step's metadata."""
        self.dev[:nbytes].copy_(self.host[:nbytes], non_blocking=True)


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
    ):
        self.index = index
        R, T = max_rows, max_tokens
        # Decode + sampling fields first so a decode step uploads only that prefix; prefill-only fields last.
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
        # The step id tag, then the sampled ids of the step's rows (a sampling graph writes a whole bucket of
        # rows; the tag comes first so padded rows never overwrite it).
        self.sampled = torch.zeros(R + 1, dtype=torch.int64, device=device)
        self.sampled_host = torch.full((R + 1,), -1, dtype=torch.int64, pin_memory=pin)
        self.mask_host = torch.zeros(R, self.words, dtype=torch.int32, pin_memory=pin)
        self.mask_dev = torch.zeros(R, self.words, dtype=torch.int32, device=device)
        self.mask_np = self.mask_host.numpy()
        # Events: forward start/end and sampling end on the compute stream, mask upload and result copy
        # on the copy stream. Re-recorded every time the slot is reused.
        self.ev_forward_start = streams.event()
        self.ev_graph_start = streams.event(
            external=True
        )  # recorded by the decode graph's first node
        self.ev_graph_end = streams.event(external=True)  # and by its last
        self.ev_forward_end = streams.event()
        self.ev_graph_sample_end = streams.event(external=True)  # the last node of a sampling graph
        self.ev_done = (
            streams.event()
        )  # this step's outputs (sampled ids, pending tokens) are written
        self.ev_mask_ready = streams.event()
        self.ev_copied = streams.event()  # sampled ids have landed in sampled_host

    def read_sampled(self, n: int, step_id: int) -> list[int]:
        """The n sampled ids of `step_id`, after its copy landed; refuses a buffer another step overwrote (I6)."""
        values = self.sampled_host[: n + 1].tolist()
        if values[0] != step_id:
            raise AssertionError(
                f"I6: slot {self.index} host buffer holds step {values[0]}, "
                f"not step {step_id}: overwritten before its commit"
            )
        return values[1:]
