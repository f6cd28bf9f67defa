"""A decode step's forward with and without programmatic dependent launch (engine/pdl.py), in one
process, interleaved, and the two compared bit for bit.

For each preset (seeded random weights, bf16) a ModelRunner captures its decode graphs as the engine
does, with PDL; then, per batch, the same forward is captured again inside `pdl.disabled()`, over
the same slot buffers. Each round replays each graph `--replays` times back to back (the order
alternating round by round) and times the block with CUDA events; the step time is the block over
the replays, its figure the median over rounds, with the paired ratio's median and range. Before
timing, each graph's logits are compared with the other's: PDL changes when a kernel's blocks
start, never what they compute. The floor is forward_kernels's (weights + the rows' K/V at the
copy bandwidth).

    python -m benchmarks.pdl_ab --presets qwen3-4b,qwen3-8b --batches 1,8,32,128 --out pdl.json
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.forward_kernels import BLOCK_SIZE, copy_bandwidth, fill_decode_rows
from bubblelab.core.files import write_atomic
from bubblelab.engine import pdl
from bubblelab.engine.config import EngineConfig
from bubblelab.engine.loader import load_model
from bubblelab.engine.model_runner import ModelRunner
from bubblelab.engine.streams import Streams


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--presets", default="qwen3-4b,qwen3-8b")
    ap.add_argument("--batches", default="1,8,32,128")
    ap.add_argument(
        "--context", type=int, default=512, help="tokens per row, the current one included"
    )
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--replays", type=int, default=20, help="replays timed as one block")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("pdl_ab needs a CUDA GPU")
    if not pdl.enabled(torch.device("cuda")):
        sys.exit("PDL is off here (GPU before sm90, Triton without gdc, or BUBBLELAB_PDL=0)")
    t0 = time.perf_counter()
    bandwidth = copy_bandwidth("cuda") or 0.0  # never None on CUDA
    summary: dict[str, Any] = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "context": args.context,
        "rounds": args.rounds,
        "replays": args.replays,
        "copy_bandwidth_gbs": round(bandwidth / 1e9, 1),
        "presets": {},
    }
    batches = [int(b) for b in args.batches.split(",")]
    for preset in args.presets.split(","):
        summary["presets"][preset] = bench_preset(preset, batches, bandwidth, args)
        gc.collect()
        torch.cuda.empty_cache()
    summary["wall_s"] = round(time.perf_counter() - t0, 1)
    text = json.dumps(summary, indent=2)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(args.out, text + "\n")


def bench_preset(preset: str, batches: list[int], bandwidth: float, args) -> dict:
    loaded = load_model(preset, dtype="bf16", device="cuda", attention_backend="triton")
    max_model_len = 2 * args.context
    cfg = EngineConfig(
        model=preset,
        device="cuda",
        dtype="bf16",
        max_num_seqs=max(batches),
        max_model_len=max_model_len,
        block_size=BLOCK_SIZE,
        num_kv_blocks=max(batches) * -(-max_model_len // BLOCK_SIZE),
        attention_backend="triton",
    )
    runner = ModelRunner(cfg, loaded, Streams(torch.device("cuda"), timing=False))
    mc = loaded.config
    weight_bytes = sum(p.numel() * p.element_size() for p in loaded.model.parameters())
    kv_per_token = 2 * mc.num_layers * mc.num_kv_heads * mc.head_dim * 2
    slot = runner.slots[0]
    result: dict[str, Any] = {"weight_bytes": weight_bytes}
    for b in batches:
        fill_decode_rows(runner, slot, b, args.context)
        graphs = {
            "pdl": runner.graphs.decode_graphs[0][b],
            "off": capture_without_pdl(runner, slot, b),
        }
        logits = {}
        for name, graph in graphs.items():
            graph.replay()
            torch.cuda.synchronize()
            logits[name] = slot.logits[:b].clone()
        times: dict[str, list[float]] = {"off": [], "pdl": []}
        for r in range(args.rounds):
            for name in ("off", "pdl") if r % 2 == 0 else ("pdl", "off"):
                times[name].append(time_block(graphs[name], args.replays))
        ratios = [off / on for off, on in zip(times["off"], times["pdl"], strict=True)]
        floor_ms = (weight_bytes + b * args.context * kv_per_token) / bandwidth * 1e3
        row = {
            "identical_logits": bool(torch.equal(logits["off"], logits["pdl"])),
            "floor_ms": round(floor_ms, 3),
            "weight_floor_ms": round(weight_bytes / bandwidth * 1e3, 3),
        }
        for name in ("off", "pdl"):
            ms = statistics.median(times[name])
            row[f"{name}_ms"] = round(ms, 4)
            row[f"{name}_range_ms"] = [round(min(times[name]), 4), round(max(times[name]), 4)]
            row[f"{name}_x_floor"] = round(ms / floor_ms, 3)
        row["speedup"] = round(statistics.median(ratios), 4)
        row["speedup_range"] = [round(min(ratios), 4), round(max(ratios), 4)]
        result[f"batch_{b}"] = row
        print(f"{preset} batch {b}: {json.dumps(row)}", file=sys.stderr, flush=True)
        del graphs
    runner.close()
    return result


def capture_without_pdl(runner: ModelRunner, slot, rows: int) -> torch.cuda.CUDAGraph:
    """The bucket's decode forward captured again, every kernel launched without PDL."""
    graph = torch.cuda.CUDAGraph()
    with pdl.disabled():
        runner.eager_decode(slot, rows)  # compiles the PDL-off kernels outside the capture
        torch.cuda.synchronize()
        with torch.cuda.graph(graph):
            runner.eager_decode(slot, rows)
    torch.cuda.synchronize()
    return graph


def time_block(graph: torch.cuda.CUDAGraph, replays: int) -> float:
    """Milliseconds a step over `replays` back-to-back replays."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    graph.replay()
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / replays


if __name__ == "__main__":
    main()
