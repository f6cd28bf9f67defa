"""Decode attention: the torch backend (page gather + masked SDPA) against the Triton paged kernel.

Part 1, attention alone: for each preset's shapes (heads, KV heads, head_dim, layers), batch size
and context, one CUDA graph holds a decode step's attention for every layer (the backend's prepare
once, then forward per layer, each layer on its own KV pool, pages shuffled, block tables
`--max-model-len` wide as in the engine, so the torch backend gathers the full width just as it does
under the engine's graphs). Median replay time over CUDA events. Part 2, the whole decode forward:
one model per preset (seeded random weights, bf16, fused ops compiled), a ModelRunner per backend
capturing the engine's decode graphs, rows of `context` tokens (benchmarks.forward_kernels' timing),
against the weight-bandwidth floor.

    python -m benchmarks.decode_attention --out decode_attention.json      # H200: under a minute
    # CPU dry run, Triton's interpreter:
    TRITON_INTERPRET=1 python -m benchmarks.decode_attention --device cpu --presets tiny-qwen3 \\
        --batches 1,2 --contexts 20,40 --layers 2 --iters 2 --engine-presets ""
"""

from __future__ import annotations

import argparse
import functools
import gc
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from benchmarks.attention import use_backend
from benchmarks.forward_kernels import copy_bandwidth, emit, fill_decode_rows, time_steps
from bubblelab.engine.attention import AttentionBackend
from bubblelab.engine.attention.metadata import AttentionMetadata
from bubblelab.engine.attention.torch_backend import TorchAttention
from bubblelab.engine.attention.triton_backend import TritonAttention
from bubblelab.engine.config import PRESETS, EngineConfig, default_dtype, parse_dtype
from bubblelab.engine.loader import load_model
from bubblelab.engine.model_runner import ModelRunner
from bubblelab.engine.streams import Streams

BLOCK_SIZE = 16
BACKENDS: dict[str, Callable[[], AttentionBackend]] = {
    "torch": TorchAttention,
    "triton": TritonAttention,
}


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--presets", default="qwen3-0.6b,qwen3-4b")
    ap.add_argument("--batches", default="1,8,32,128")
    ap.add_argument(
        "--contexts", default="150,1024", help="tokens per row, the current one included"
    )
    ap.add_argument(
        "--max-model-len", type=int, default=2048, help="block-table width (the engine's default)"
    )
    ap.add_argument(
        "--layers", type=int, default=None, help="attention calls per graph (default: the preset's)"
    )
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument(
        "--engine-presets", default="qwen3-4b", help="whole-forward comparison; empty to skip"
    )
    ap.add_argument("--engine-batches", default="1")
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON summary here")
    args = ap.parse_args()
    batches, contexts = _ints(args.batches), _ints(args.contexts)
    if max(contexts) > args.max_model_len:
        ap.error("--contexts must not exceed --max-model-len")

    t0 = time.perf_counter()
    cuda = args.device == "cuda"
    summary = {
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "torch": torch.__version__,
        "block_size": BLOCK_SIZE,
        "max_model_len": args.max_model_len,
        "attention": [],
        "forward": [],
    }
    print(
        f"{'preset':<12} {'B':>4} {'ctx':>5} {'layers':>6} {'torch ms':>9} {'triton ms':>9} "
        f"{'speedup':>7} {'max diff':>8}",
        file=sys.stderr,
    )
    for preset in args.presets.split(","):
        for b in batches:
            for ctx in contexts:
                try:
                    row = bench_attention(preset, b, ctx, args)
                # one failing shape (e.g. out of memory) must not lose the others
                except Exception as exc:
                    traceback.print_exc()
                    row = {
                        "preset": preset,
                        "batch": b,
                        "context": ctx,
                        "error": f"{type(exc).__name__}: {exc}",
                    }
                summary["attention"].append(row)
                if "error" not in row:
                    print(
                        f"{preset:<12} {b:>4} {ctx:>5} {row['layers']:>6} "
                        f"{row['torch_ms']:>9.3f} {row['triton_ms']:>9.3f} "
                        f"{row['speedup']:>6.2f}x {row['max_abs_diff']:>8.1e}",
                        file=sys.stderr,
                        flush=True,
                    )
                gc.collect()
                if cuda:
                    torch.cuda.empty_cache()
    if args.engine_presets:
        bandwidth = copy_bandwidth(args.device)
        for preset in args.engine_presets.split(","):
            try:
                summary["forward"] += bench_forward(
                    preset, _ints(args.engine_batches), contexts, bandwidth, args
                )
            except Exception as exc:
                traceback.print_exc()
                summary["forward"].append(
                    {"preset": preset, "error": f"{type(exc).__name__}: {exc}"}
                )
    summary["wall_s"] = round(time.perf_counter() - t0, 1)
    emit(summary, args.out)


def bench_attention(preset: str, batch: int, context: int, args) -> dict:
    """One decode step's attention over every layer, per backend: median ms per step, and the
    outputs' max diff."""
    cfg = PRESETS[preset]
    cuda = args.device == "cuda"
    dtype = parse_dtype(default_dtype(args.device))
    layers = args.layers or cfg.num_layers
    width = -(-args.max_model_len // BLOCK_SIZE)
    pages = -(-context // BLOCK_SIZE)
    num_blocks = batch * pages
    # Per layer, as ModelRunner's pool: [layers, blocks + 1 (scratch), block_size, kv_heads,
    # head_dim].
    pool_shape = (layers, num_blocks + 1, BLOCK_SIZE, cfg.num_kv_heads, cfg.head_dim)
    k_pool = torch.randn(pool_shape, device=args.device, dtype=dtype)
    v_pool = torch.randn(pool_shape, device=args.device, dtype=dtype)
    tables = torch.full(
        (batch, width), num_blocks, dtype=torch.int32
    )  # unused entries: the scratch page
    tables[:, :pages] = torch.randperm(num_blocks, generator=torch.Generator().manual_seed(0)).view(
        batch, pages
    )
    meta = AttentionMetadata(
        is_prefill=False,
        context_lens=torch.full((batch,), context, dtype=torch.int32, device=args.device),
        block_tables=tables.to(args.device),
    )
    q = torch.randn(batch, cfg.num_heads, cfg.head_dim, device=args.device, dtype=dtype)
    kv = torch.zeros(batch, cfg.num_kv_heads, cfg.head_dim, device=args.device, dtype=dtype)
    scale = cfg.head_dim**-0.5

    row: dict[str, Any] = {"preset": preset, "batch": batch, "context": context, "layers": layers}
    outs = {}
    for name, cls in BACKENDS.items():
        backend = cls()

        def step(backend: AttentionBackend = backend) -> torch.Tensor:
            step_meta = backend.prepare(meta, k_pool[0], dtype)
            o = q
            for layer in range(layers):  # k/v: already in the cache, as the model leaves them
                o = backend.forward(q, kv, kv, k_pool[layer], v_pool[layer], step_meta, scale)
            return o

        outs[name] = step().float()  # also the warm-up: Triton compiles here, not under capture
        run: Callable[[], object] = step
        if cuda:
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                step()
            run = graph.replay
        row[f"{name}_ms"] = round(time_steps(run, args.iters, cuda), 4)
        del run
    row["speedup"] = round(row["torch_ms"] / row["triton_ms"], 2)
    row["triton_us_per_layer"] = round(row["triton_ms"] * 1e3 / layers, 2)
    row["max_abs_diff"] = float((outs["torch"] - outs["triton"]).abs().max())
    return row


def bench_forward(
    preset: str, batches: list[int], contexts: list[int], bandwidth: float | None, args
) -> list[dict]:
    """The engine's decode graph (whole forward) per backend, on one set of weights: the backends
    swap in place."""
    cuda = args.device == "cuda"
    dtype = default_dtype(args.device)
    loaded = load_model(preset, dtype=dtype, device=args.device, attention_backend="torch")
    weight_bytes = sum(p.numel() * p.element_size() for p in loaded.model.parameters())
    floor_ms = weight_bytes / bandwidth * 1e3 if bandwidth else None
    rows = []
    for name, cls in BACKENDS.items():
        use_backend(loaded.model, cls())
        cfg = EngineConfig(
            model=preset,
            device=args.device,
            dtype=dtype,
            max_num_seqs=max(batches),
            max_model_len=args.max_model_len,
            block_size=BLOCK_SIZE,
            num_kv_blocks=max(batches) * -(-args.max_model_len // BLOCK_SIZE),
            attention_backend=name,
        )
        t0 = time.perf_counter()
        runner = ModelRunner(
            cfg, loaded, Streams(torch.device(args.device), timing=False)
        )  # CUDA: captures
        startup_s = time.perf_counter() - t0
        slot = runner.slots[0]
        for b in batches:
            for ctx in contexts:
                fill_decode_rows(runner, slot, b, ctx)
                step = (
                    runner.graphs.decode_graphs[0][b].replay
                    if cuda
                    else functools.partial(runner.eager_decode, slot, b)
                )
                ms = time_steps(step, args.iters, cuda)
                row = {
                    "preset": preset,
                    "backend": name,
                    "batch": b,
                    "context": ctx,
                    "step_ms": round(ms, 4),
                    "startup_s": round(startup_s, 1),
                    "compiled": loaded.model.compile_enabled,
                }
                if floor_ms:
                    row.update(floor_ms=round(floor_ms, 4), x_floor=round(ms / floor_ms, 3))
                rows.append(row)
                print(
                    f"forward {preset} {name:<6} B={b:<3} ctx={ctx:<5} {ms:8.3f} ms"
                    + (f"  {ms / floor_ms:.2f}x floor" if floor_ms else ""),
                    file=sys.stderr,
                    flush=True,
                )
        runner.close()
        gc.collect()
    return rows


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


if __name__ == "__main__":
    main()
