"""Decode-step time and kernels per step, eager vs torch.compile'd fused ops, against the
weight-bandwidth floor.

For each preset (seeded random weights, bf16 on CUDA) and each mode, a ModelRunner captures its
decode graphs as the engine does; then, per batch size, the slot's metadata is filled with rows of
`--context` tokens and the bucket's graph is replayed: median step time over CUDA events, kernels
per step from torch.profiler (graph replay and, as a cross-check, the same body run eagerly). The
floor is (weight bytes + the rows' K/V bytes) / device-to-device copy bandwidth: a decode step must
read every weight once and each row's whole context in every layer.
On CPU (dry run) there are no graphs: the body runs directly and "kernels" counts top-level aten
ops, views included. The torch backend gathers the block table's full width (--max-model-len) every
step, so large batches also measure that traffic.

    python -m benchmarks.forward_kernels           # H200/H100: qwen3-0.6b, qwen3-4b; batch 1, 8, 32
    python -m benchmarks.forward_kernels --device cpu --presets tiny-llama
"""

from __future__ import annotations

import argparse
import collections
import functools
import gc
import json
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from bubblelab.core.files import write_atomic
from bubblelab.engine.config import EngineConfig, default_dtype
from bubblelab.engine.cuda_graphs import decode_buckets as graph_buckets
from bubblelab.engine.loader import LoadedModel, load_model
from bubblelab.engine.model_runner import ModelRunner
from bubblelab.engine.streams import Streams

NOT_KERNELS = ("memcpy", "memset")  # copies show up as device activity too; count only kernels
BLOCK_SIZE = 16


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--presets", default="qwen3-0.6b,qwen3-4b")
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument(
        "--context", type=int, default=512, help="tokens per row, the current one included"
    )
    ap.add_argument(
        "--max-model-len",
        type=int,
        default=1024,
        help="block-table width the torch backend gathers",
    )
    ap.add_argument("--attention-backend", default="torch")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--modes", default="eager,compiled", help="eager, compiled or both")
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON summary here")
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    if args.context > args.max_model_len:
        ap.error("--context must not exceed --max-model-len")
    if any(b not in graph_buckets(max(batches)) for b in batches):
        ap.error(f"batch sizes must be graph buckets: {graph_buckets(max(batches))}")

    t0 = time.perf_counter()
    bandwidth = copy_bandwidth(args.device)
    summary = {
        "device": _device_name(args.device),
        "torch": torch.__version__,
        "context": args.context,
        "max_model_len": args.max_model_len,
        "attention_backend": args.attention_backend,
        "copy_bandwidth_gbs": round(bandwidth / 1e9, 1) if bandwidth else None,
        "presets": {},
    }
    for preset in args.presets.split(","):
        summary["presets"][preset] = {}
        for mode in args.modes.split(","):
            try:
                result = bench_preset(preset, mode == "compiled", batches, bandwidth, args)
            except Exception as exc:  # one failing mode must not lose the others' numbers
                traceback.print_exc()
                result = {"error": f"{type(exc).__name__}: {exc}"}
            summary["presets"][preset][mode] = result
            print(f"{preset} {mode}: {json.dumps(result)}", file=sys.stderr, flush=True)
            gc.collect()
            if args.device == "cuda":
                torch.cuda.empty_cache()
        _add_speedups(summary["presets"][preset])
    summary["wall_s"] = round(time.perf_counter() - t0, 1)
    emit(summary, args.out)


def bench_preset(
    preset: str, compiled: bool, batches: list[int], bandwidth: float | None, args
) -> dict:
    cuda = args.device == "cuda"
    loaded = load(preset, args.device, args.attention_backend)
    t0 = time.perf_counter()
    # CUDA: compiles, captures
    runner = build_runner(
        loaded,
        preset,
        args.device,
        max(batches),
        args.max_model_len,
        args.attention_backend,
        compiled,
    )
    num_layers = loaded.config.num_layers
    result: dict[str, Any] = {
        "compiled": loaded.model.compile_enabled,
        "startup_s": round(time.perf_counter() - t0, 1),
        "num_layers": num_layers,
        "weight_bytes": weight_bytes(loaded),
    }
    if bandwidth:
        result["floor_ms"] = round(result["weight_bytes"] / bandwidth * 1e3, 3)
    kv_bytes_per_token = kv_bytes(loaded)
    slot = runner.slots[0]
    for b in batches:
        fill_decode_rows(runner, slot, b, args.context)
        body = functools.partial(runner.eager_decode, slot, b)
        step = runner.graphs.decode_graphs[0][b].replay if cuda else body
        kernels, kernel_us = count_kernels(step, cuda)
        row: dict[str, Any] = {
            "step_ms": round(time_steps(step, args.iters, cuda), 3),
            "kernels": sum(kernels.values()),
            "per_layer": round(sum(kernels.values()) / num_layers, 1),
        }
        if bandwidth:
            row["kv_bytes"] = b * args.context * kv_bytes_per_token
            floor_ms = (result["weight_bytes"] + row["kv_bytes"]) / bandwidth * 1e3
            row["floor_ms"] = round(floor_ms, 3)
            row["x_floor"] = round(row["step_ms"] / floor_ms, 2)
        if cuda:  # the same body launched eagerly: a cross-check of the graph count
            row["kernels_eager_body"] = sum(count_kernels(body, cuda)[0].values())
        if b == batches[0]:
            row["top_kernels"] = dict(kernels.most_common(12))
            if kernel_us:  # where the step's time goes: kernel time by name, and its sum
                row["kernel_ms"] = round(sum(kernel_us.values()) / 1e3, 3)
                row["top_kernel_us"] = {k: round(v, 1) for k, v in kernel_us.most_common(12)}
        result[f"batch_{b}"] = row
    runner.close()
    return result


def load(preset: str, device: str, attention_backend: str) -> LoadedModel:
    """The preset with seeded random weights in the device's default dtype."""
    return load_model(
        preset, dtype=default_dtype(device), device=device, attention_backend=attention_backend
    )


def build_runner(
    loaded: LoadedModel,
    preset: str,
    device: str,
    max_rows: int,
    max_model_len: int,
    attention_backend: str,
    compiled: bool | None = None,
) -> ModelRunner:
    """A ModelRunner over `loaded` (from load()) as the engine builds one, with K/V pages for
    `max_rows` rows of `max_model_len` tokens. On CUDA this compiles and captures every graph."""
    cfg = EngineConfig(
        model=preset,
        device=device,
        dtype=default_dtype(device),
        max_num_seqs=max_rows,
        max_model_len=max_model_len,
        block_size=BLOCK_SIZE,
        num_kv_blocks=max_rows * -(-max_model_len // BLOCK_SIZE),
        compile=compiled,
        attention_backend=attention_backend,
    )
    return ModelRunner(cfg, loaded, Streams(torch.device(device), timing=False))


def weight_bytes(loaded: LoadedModel) -> int:
    """Bytes a decode step must read once: every weight."""
    return sum(p.numel() * p.element_size() for p in loaded.model.parameters())


def kv_bytes(loaded: LoadedModel) -> int:
    """K and V bytes of one token over every layer. Each row's attention reads its whole
    context's K and V in every layer: at 128 rows of 512 tokens that is more bytes than the
    weights, so the floor counts both."""
    mc = loaded.config
    size = loaded.model.embed_tokens.weight.element_size()
    return 2 * mc.num_layers * mc.num_kv_heads * mc.head_dim * size


def emit(summary: dict, out: Path | None) -> None:
    """The JSON summary on stdout, and into `out` when given."""
    text = json.dumps(summary, indent=2)
    print(text)
    if out is not None:
        write_atomic(out, text + "\n")


def fill_decode_rows(runner: ModelRunner, slot, b: int, context: int) -> None:
    """b rows of `context` tokens on distinct pages; the current token's K/V goes to its last
    slot."""
    h, bs = slot.meta.np, slot.block_size
    pages = -(-context // bs)
    h["rows"][:b] = range(b)
    h["positions"][:b] = context - 1
    h["context_lens"][:b] = context
    for r in range(b):
        table = [r * slot.max_blocks + p for p in range(pages)]
        slot.block_tables_h[r, :pages] = table
        h["slot_mapping"][r] = table[-1] * bs + (context - 1) % bs
    slot.meta.upload(slot.decode_nbytes)
    runner.streams.synchronize()


def time_steps(step, iters: int, cuda: bool) -> float:
    """Median milliseconds per step."""
    for _ in range(3):
        step()
    if not cuda:
        times = []
        for _ in range(iters):
            t = time.perf_counter()
            step()
            times.append((time.perf_counter() - t) * 1e3)
        return statistics.median(times)
    torch.cuda.synchronize()
    events = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        for _ in range(iters)
    ]
    for start, end in events:
        start.record()
        step()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in events)


def count_kernels(
    step: Callable[[], object], cuda: bool
) -> tuple[collections.Counter[str], collections.Counter[str]]:
    """Kernels one step launches by name (CUDA), or its top-level aten ops (CPU: a proxy, views
    included); and the device time (us) per kernel name (CUDA only, else empty)."""
    device_us: collections.Counter[str] = collections.Counter()
    with profile(
        activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    ) as prof:
        step()
        if cuda:
            torch.cuda.synchronize()
    if cuda:
        kernels = [
            e
            for e in prof.events()
            if e.device_type == torch.autograd.DeviceType.CUDA
            and not any(w in e.name.lower() for w in NOT_KERNELS)
        ]
        names = [e.name for e in kernels]
        for e in kernels:
            device_us[e.name[:80]] += e.time_range.elapsed_us()
    else:
        names = [
            e.name
            for e in prof.events()
            if e.name.startswith("aten::")
            and (e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::"))
        ]
    return collections.Counter(name[:80] for name in names), device_us


def copy_bandwidth(device: str, nbytes: int = 1 << 30) -> float | None:
    """Device-to-device copy bandwidth in bytes/s (read + write), the ceiling a weight-streaming
    step can reach."""
    if device != "cuda":
        return None
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        dst.copy_(src)
    end.record()
    torch.cuda.synchronize()
    return 2 * nbytes * 10 / (start.elapsed_time(end) / 1e3)


def _add_speedups(modes: dict) -> None:
    eager, compiled = modes.get("eager", {}), modes.get("compiled", {})
    for key, row in compiled.items():
        if key.startswith("batch_") and "step_ms" in eager.get(key, {}):
            row["speedup"] = round(eager[key]["step_ms"] / row["step_ms"], 2)


def _device_name(device: str) -> str:
    return torch.cuda.get_device_name() if device == "cuda" else "cpu"


if __name__ == "__main__":
    main()
