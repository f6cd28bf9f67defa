"""SiLU-and-mul inside the down projection's GEMV (models.transformer.MLP.fuse_act), on and off in
one process. (A first version also A/B'd the attention spans merged by the attention kernel's last
program instead of a second kernel: 4-5% slower at 1-16 rows on an H200, backed out;
docs/engine-speed.md.)

1. The forward alone: on a runner sized as the engine sizes its own (32 rows of 256 tokens), each
   variant's decode graph is captured for each row count and replayed back to back, rounds
   interleaved (pdl_ab's timing; the engine's PDL policy), with the logits compared against the
   unfused graph's.
2. The engine: per round and variant (alternating), an engine at depth 2 built with that variant
   and a closed loop at each stream count timed by its timeline; tokens/s is what users see.

    python -m benchmarks.fusion_ab --preset qwen3-4b --out $OUT/fusion
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from bubblelab.engine.config import default_dtype
from bubblelab.engine.loader import load_model
from bubblelab.engine.models.transformer import MLP
from bubblelab.runs.driver import run_workload
from bubblelab.runs.workload import WorkloadSpec

from .depth_sweep import engine_for, step_stats
from .forward_kernels import build_runner, copy_bandwidth, emit, fill_decode_rows, weight_bytes
from .pdl_ab import capture, time_block

VARIANTS = {"unfused": False, "fused": True}  # name: MLP.fuse_act


@contextlib.contextmanager
def variant(name: str) -> Iterator[None]:
    """Graphs captured (engines built) inside use this variant."""
    before, MLP.fuse_act = MLP.fuse_act, VARIANTS[name]
    try:
        yield
    finally:
        MLP.fuse_act = before


def forward_alone(loaded, args) -> dict:
    bandwidth = copy_bandwidth("cuda") or 0.0  # never None on CUDA
    runner = build_runner(loaded, args.preset, "cuda", 32, 256, loaded.model.attn_backend.name)
    slot, names = runner.slots[0], list(VARIANTS)
    bandwidth_floor_ms = weight_bytes(loaded) / bandwidth * 1e3
    out: dict[str, Any] = {
        "copy_bandwidth_gbs": round(bandwidth / 1e9, 1),
        "weight_floor_ms": round(bandwidth_floor_ms, 4),
    }
    for rows in (int(b) for b in args.batches.split(",")):
        fill_decode_rows(runner, slot, rows, args.context)
        graphs, logits = {}, {}
        for name in names:
            with variant(name):
                graphs[name] = capture(runner, slot, rows, "engine")
            graphs[name].replay()
            torch.cuda.synchronize()
            logits[name] = slot.logits[:rows].clone()
        times: dict[str, list[float]] = {n: [] for n in names}
        for r in range(args.rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                times[name].append(time_block(graphs[name], args.replays))
        row: dict[str, Any] = {}
        for name in names:
            ms = times[name]
            row[f"{name}_ms"] = round(statistics.median(ms), 4)
            row[f"{name}_x_floor"] = round(statistics.median(ms) / bandwidth_floor_ms, 3)
            ratios = [u / t for u, t in zip(times["unfused"], ms, strict=True)]
            row[f"{name}_speedup"] = round(statistics.median(ratios), 4)
            row[f"{name}_speedup_range"] = [round(min(ratios), 4), round(max(ratios), 4)]
            row[f"{name}_identical_logits"] = bool(torch.equal(logits[name], logits["unfused"]))
        out[f"rows_{rows}"] = row
        print(f"{args.preset} {rows} rows: {json.dumps(row)}", file=sys.stderr, flush=True)
        del graphs
    runner.close()
    return out


def engine_rounds(loaded, args) -> list[dict]:
    dtype, rows = default_dtype("cuda"), []
    names = list(VARIANTS)
    for r in range(args.engine_repeats):
        for name in names if r % 2 == 0 else names[::-1]:
            with variant(name):
                engine = engine_for(loaded, "cuda", dtype, 2)
            for streams in (int(s) for s in args.streams.split(",")):
                spec = WorkloadSpec(streams=streams, requests=4 * streams, output_len_mean=args.L)
                run_workload(engine, spec, warmup=True)
                res = run_workload(engine, spec, warmup=False)
                row = {"variant": name, "repeat": r, "streams": streams}
                row |= {"tokens_per_s": res.summary["tokens_per_s"]} | step_stats(res, 2)
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
            engine.close()
            gc.collect()
            torch.cuda.empty_cache()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--preset", default="qwen3-4b")
    ap.add_argument("--batches", default="1,4", help="rows of the forward alone")
    ap.add_argument("--context", type=int, default=110, help="tokens of each replayed row")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--replays", type=int, default=20)
    ap.add_argument("--streams", default="1,8", help="closed-loop streams of the engine rounds")
    ap.add_argument("--engine-repeats", type=int, default=2, help="rounds of (unfused, fused)")
    ap.add_argument("--L", type=float, default=110.0, help="mean output length")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("fusion_ab needs a CUDA GPU")
    loaded = load_model(args.preset, dtype=default_dtype("cuda"), device="cuda", seed=0)
    summary: dict[str, Any] = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "preset": args.preset,
        "context": args.context,
        "forward_alone": forward_alone(loaded, args),
    }
    if args.engine_repeats:
        summary["engine"] = engine_rounds(loaded, args)
    emit(summary, args.out / f"fusion-{args.preset}.json")


if __name__ == "__main__":
    main()
