"""How should a step's inputs reach the tensor-parallel workers? The engine's shared-memory ring
against a torch.distributed (gloo) broadcast, on the host alone (no model, no GPU).

Two processes, rank 0 writing and rank 1 reading, exchange the engine's real messages: a decode
step's packed inputs (DecodeSlot.decode_nbytes) at 8-128 rows, a prefill's (the whole packed
buffer), and constrained-decoding bitmask rows at the Qwen3 vocabulary. Each message is sent
`--every-us` after the previous one (a step's pace, not back to back). Per method and message,
medians and p90 over --messages (the first tenth dropped):
  send_us     rank 0's host time to hand the message over (what the tick pays: the `handoff` range);
  latency_us  from the start of the send to the reader holding the bytes in its own buffer.
Methods: METHODS below.

    python -m benchmarks.tp_handoff --out docs/measurements/tp/handoff-cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as tmp

from bubblelab.core.files import write_atomic
from bubblelab.engine.decode_slot import DecodeSlot
from bubblelab.engine.distributed.handoff import HEADER_WORDS, ShmRing
from bubblelab.engine.sampler import bitmask_words
from bubblelab.engine.streams import Streams

QWEN3_VOCAB = 151936
# shm: the ring, the reader asleep on its semaphore; shm-spin: the reader spinning on it (the
# engine's workers on CUDA); gloo: torch.distributed.broadcast of a header then the bytes.
METHODS = ("shm", "shm-spin", "gloo")


def message_sizes(max_model_len: int, block_size: int, max_tokens: int) -> dict[str, int]:
    """Payload bytes of the engine's messages, read off real DecodeSlots."""
    sizes = {}
    streams = Streams(torch.device("cpu"))
    for rows in (8, 32, 128):
        slot = DecodeSlot(
            0, max_rows=rows, max_tokens=max_tokens, max_blocks=-(-max_model_len // block_size),
            vocab_size=8, logits_dtype=torch.float32, device=torch.device("cpu"), streams=streams,
            pin=False, pad_row=rows, scratch_page=0, block_size=block_size,
        )  # fmt: skip
        sizes[f"decode-{rows}"] = slot.decode_nbytes
        if rows == 128:
            sizes[f"prefill-{rows}"] = slot.meta.nbytes
    for rows in (8, 32, 128):
        sizes[f"mask-{rows}"] = rows * bitmask_words(QWEN3_VOCAB) * 4
    streams.close()
    return sizes


def _pace(deadline_ns: int) -> None:
    while time.perf_counter_ns() < deadline_ns:
        time.sleep(0) if deadline_ns - time.perf_counter_ns() < 200_000 else time.sleep(0.0001)


def _writer_shm(ring: ShmRing, payload: np.ndarray, n: int, every_ns: int) -> list[int]:
    header, sends = np.zeros(HEADER_WORDS, np.int64), []
    t = time.perf_counter_ns()
    for i in range(n):
        _pace(t + i * every_ns)
        start = time.perf_counter_ns()
        header[1], header[13] = i, start
        ring.send(header, payload, lambda r: None)
        sends.append(time.perf_counter_ns() - start)
    return sends


def _reader_shm(ring: ShmRing, dest: np.ndarray, n: int, spin_s: float) -> list[int]:
    lat = []
    for _ in range(n):
        header, payload = ring.recv(0, lambda: None, spin_s)
        dest[: payload.nbytes] = payload
        lat.append(time.perf_counter_ns() - int(header[13]))
        ring.release(0)
    return lat


def _writer_gloo(payload: torch.Tensor, n: int, every_ns: int) -> list[int]:
    header, sends = torch.zeros(HEADER_WORDS, dtype=torch.int64), []
    t = time.perf_counter_ns()
    for i in range(n):
        _pace(t + i * every_ns)
        start = time.perf_counter_ns()
        header[1], header[6], header[13] = i, payload.numel(), start
        dist.broadcast(header, 0)  # the size and the step facts, then the bytes
        dist.broadcast(payload, 0)
        sends.append(time.perf_counter_ns() - start)
    return sends


def _reader_gloo(dest: torch.Tensor, n: int) -> list[int]:
    header, lat = torch.zeros(HEADER_WORDS, dtype=torch.int64), []
    for _ in range(n):
        dist.broadcast(header, 0)
        dist.broadcast(dest[: int(header[6])], 0)  # straight into the reader's own buffer
        lat.append(time.perf_counter_ns() - int(header[13]))
    return lat


def _run(rank: int, port: int, ready, space, spec_q, out_q, sizes, n: int, every_ns: int) -> None:
    torch.set_num_threads(1)
    store = dist.TCPStore("127.0.0.1", port, 2, is_master=False)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=2)
    capacity = max(sizes.values())
    if rank == 0:
        ring = ShmRing.make(capacity, ready, space)
        spec_q.put(ring.spec)
    else:
        ring = ShmRing(spec_q.get(), ready, space, create=False)
    dest = torch.zeros(capacity, dtype=torch.uint8)
    results = {}
    for name, nbytes in sizes.items():
        payload = torch.randint(0, 255, (nbytes,), dtype=torch.uint8)
        for method in METHODS:
            dist.barrier()
            if rank == 0 and method != "gloo":
                results[(name, method)] = _writer_shm(ring, payload.numpy(), n, every_ns)
            elif rank == 0:
                results[(name, method)] = _writer_gloo(payload, n, every_ns)
            elif method != "gloo":
                spin_s = 2 * every_ns / 1e9 if method == "shm-spin" else 0.0
                results[(name, method)] = _reader_shm(ring, dest.numpy(), n, spin_s)
            else:
                results[(name, method)] = _reader_gloo(dest, n)
    dist.barrier()
    out_q.put((rank, results))
    ring.close(unlink=rank == 0)
    dist.destroy_process_group()


def _stats(ns: list[int]) -> dict[str, float]:
    us = np.asarray(ns[len(ns) // 10 :]) / 1e3  # the first tenth is warm-up
    return {"median": float(np.median(us)), "p90": float(np.percentile(us, 90))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=400)
    ap.add_argument("--every-us", type=int, default=2000, help="pace: one message per step")
    ap.add_argument("--max-model-len", type=int, default=2048)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=8192, help="max_num_batched_tokens")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    sizes = message_sizes(args.max_model_len, args.block_size, args.max_tokens)
    ctx = tmp.get_context("spawn")
    ready, space = [ctx.Semaphore(0)], [ctx.Semaphore(ShmRing.SLOTS)]
    spec_q, out_q = ctx.Queue(), ctx.Queue()
    store = dist.TCPStore("127.0.0.1", 0, 2, is_master=True, wait_for_workers=False)
    common = (store.port, ready, space, spec_q, out_q, sizes, args.messages, args.every_us * 1000)
    procs = [ctx.Process(target=_run, args=(r, *common)) for r in range(2)]
    for p in procs:
        p.start()
    got = dict(out_q.get() for _ in procs)
    for p in procs:
        p.join()
    rows = []
    print(f"{'message':<12}{'bytes':>9}  {'method':<9}{'send us':>16}{'latency us':>18}")
    for name, nbytes in sizes.items():
        for method in METHODS:
            send, lat = _stats(got[0][(name, method)]), _stats(got[1][(name, method)])
            rows.append({"message": name, "bytes": nbytes, "method": method,
                         "send_us": send, "latency_us": lat})  # fmt: skip
            cells = f"{send['median']:>8.1f} ({send['p90']:>5.1f})"
            cells += f"{lat['median']:>10.1f} ({lat['p90']:>5.1f})"
            print(f"{name:<12}{nbytes:>9}  {method:<9}{cells}")
    if args.out:
        doc = {"machine": f"{os.cpu_count()} CPUs", "torch": torch.__version__, "args": vars(args)}
        write_atomic(args.out, json.dumps({**doc, "rows": rows}, indent=1, default=str))


if __name__ == "__main__":
    main()
