"""A decode step's forward with and without programmatic dependent launch (engine/pdl.py), in one
process, interleaved, and the two compared bit for bit.

For each preset (seeded random weights, bf16) a ModelRunner is built as the engine builds it; then,
per batch, its decode forward is captured once per PDL mode (off, engine, own, all), over the
same slot buffers. Each round replays each graph `--replays` times back to back (the order
alternating round by round) and times the block with CUDA events; the step time is the block over
the replays, its figure the median over rounds, with each mode's paired ratio against the first
(median and range). Before timing, the modes' logits are compared bit for bit: PDL changes when a
kernel's blocks start, never what they compute. `--profile-batches` adds each mode's device time by
kernel name at those batches. The floor is forward_kernels's (weights + the rows' K/V at the
copy bandwidth).

`--aa` captures the first mode once more, after the others, and times it as one more variant
(`<mode>-again`): two captures of the same code differ only in where their buffers landed, and on
an H200 that alone moved a forward by up to ~1%. Its ratio is the resolution of every other.
`--table PATH` captures every mode once more with that GEMM table in place of this GPU's
(`<mode>@table`): a retuned table against the committed one, in one process. `--fusions SETS`
captures every mode once more per set of one-row fusions (engine/fusion.py; sets separated by
`/`, e.g. `all/norm/silu`) as `<mode>+<set>`; the plain modes run with BUBBLELAB_FUSE's (none
unless set).

    python -m benchmarks.pdl_ab --presets qwen3-4b,qwen3-8b --batches 1,8,32,128 --out pdl.json
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import gc
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks.forward_kernels import (
    build_runner,
    copy_bandwidth,
    emit,
    fill_decode_rows,
    kv_bytes,
    load,
    weight_bytes,
)
from bubblelab.engine import fusion, linear, pdl
from bubblelab.engine.model_runner import ModelRunner


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
    ap.add_argument(
        "--modes", default="off,engine,own,all", help="PDL modes (engine/pdl.py), off first"
    )
    ap.add_argument("--profile-batches", default="", help="also sum kernel time by name here")
    ap.add_argument("--aa", action="store_true", help="the first mode captured again: A/A")
    ap.add_argument("--table", type=Path, default=None, help="each mode again with this table")
    ap.add_argument("--fusions", default="", help="each mode again per fusion set: none/norm")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    for chosen in filter(None, args.fusions.split("/")):
        fusion.parse(chosen)  # a typo fails here, not after the first preset's load
    if not torch.cuda.is_available():
        sys.exit("pdl_ab needs a CUDA GPU")
    if args.table is not None and not args.table.is_file():
        sys.exit(f"--table: no file at {args.table}")
    with pdl.using("all"):
        if not pdl.enabled(torch.device("cuda")):
            sys.exit("PDL is not available here (a GPU before sm90, or Triton without gdc)")
    t0 = time.perf_counter()
    bandwidth = copy_bandwidth("cuda") or 0.0  # never None on CUDA
    summary: dict[str, Any] = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "context": args.context,
        "rounds": args.rounds,
        "replays": args.replays,
        "copy_bandwidth_gbs": round(bandwidth / 1e9, 1),
        "table": None if args.table is None else str(args.table),
        "presets": {},
    }
    batches = [int(b) for b in args.batches.split(",")]
    for preset in args.presets.split(","):
        summary["presets"][preset] = bench_preset(preset, batches, bandwidth, args)
        gc.collect()
        torch.cuda.empty_cache()
    summary["wall_s"] = round(time.perf_counter() - t0, 1)
    emit(summary, args.out)


def bench_preset(preset: str, batches: list[int], bandwidth: float, args) -> dict:
    loaded = load(preset, "cuda", "triton")
    runner = build_runner(loaded, preset, "cuda", max(batches), 2 * args.context, "triton")
    weights, kv_per_token = weight_bytes(loaded), kv_bytes(loaded)
    slot = runner.slots[0]
    result: dict[str, Any] = {"weight_bytes": weights}
    modes = args.modes.split(",")
    if args.table is not None:
        modes += [f"{m}@table" for m in modes]
    modes += [f"{m}+{f}" for m in modes for f in filter(None, args.fusions.split("/"))]
    if args.aa:
        modes.append(f"{modes[0]}-again")
    profiled = {int(b) for b in args.profile_batches.split(",") if b}
    for b in batches:
        fill_decode_rows(runner, slot, b, args.context)
        graphs = {m: capture(runner, slot, b, m, args.table) for m in modes}
        logits = {}
        for name, graph in graphs.items():
            graph.replay()
            torch.cuda.synchronize()
            logits[name] = slot.logits[:b].clone()
        times: dict[str, list[float]] = {m: [] for m in modes}
        for r in range(args.rounds):
            for name in modes if r % 2 == 0 else modes[::-1]:
                times[name].append(time_block(graphs[name], args.replays))
        floor_ms = (weights + b * args.context * kv_per_token) / bandwidth * 1e3
        row: dict[str, Any] = {
            # PDL never changes a bit; another table's tiles may sum in another order
            "identical_logits": all(
                torch.equal(logits[modes[0]], t)
                for m, t in logits.items()
                if "@table" not in m and "+" not in m
            ),
            "floor_ms": round(floor_ms, 3),
            "weight_floor_ms": round(weights / bandwidth * 1e3, 3),
        }
        for m in modes:
            if "+" in m:  # fusions sum some fp32 terms in another order
                row[f"{m}_max_logit_diff"] = (logits[m] - logits[modes[0]]).abs().max().item()
                row[f"{m}_same_argmax"] = bool(
                    torch.equal(logits[m].argmax(-1), logits[modes[0]].argmax(-1))
                )
        if args.table is not None:
            tabled = [logits[m] for m in modes if m.endswith("@table")]
            row["table_identical_logits"] = all(torch.equal(tabled[0], t) for t in tabled)
            row["table_max_logit_diff"] = (tabled[0] - logits[modes[0]]).abs().max().item()
            row["table_same_argmax"] = bool(
                torch.equal(tabled[0].argmax(-1), logits[modes[0]].argmax(-1))
            )
        for name in modes:
            ms = statistics.median(times[name])
            row[f"{name}_ms"] = round(ms, 4)
            row[f"{name}_range_ms"] = [round(min(times[name]), 4), round(max(times[name]), 4)]
            row[f"{name}_x_floor"] = round(ms / floor_ms, 3)
            if name != modes[0]:  # paired, round by round, against the first mode
                ratios = [a / c for a, c in zip(times[modes[0]], times[name], strict=True)]
                row[f"{name}_speedup"] = round(statistics.median(ratios), 4)
                row[f"{name}_speedup_range"] = [round(min(ratios), 4), round(max(ratios), 4)]
            if b in profiled:
                row[f"{name}_kernel_us"] = kernel_us(graphs[name])
        result[f"batch_{b}"] = row
        print(f"{preset} batch {b}: {json.dumps(row)}", file=sys.stderr, flush=True)
        del graphs
    runner.close()
    return result


def mode_context(mode: str) -> contextlib.AbstractContextManager:
    """Kernels launched inside use this PDL mode ("engine": the engine's own policy,
    BUBBLELAB_PDL and pdl.MAX_ROWS; the others apply at every row count)."""
    return contextlib.nullcontext() if mode == "engine" else pdl.using(mode)


def capture(
    runner: ModelRunner, slot, rows: int, variant: str, table: Path | None = None
) -> torch.cuda.CUDAGraph:
    """The bucket's decode forward captured again as this variant: a PDL mode (mode_context),
    "-again" for the A/A, "@table" with that GEMM table, "+<set>" with those fusions."""
    base, _, fused = variant.partition("+")
    mode = base.removesuffix("-again").removesuffix("@table")
    graph = torch.cuda.CUDAGraph()
    tables = (
        linear.using_table(table)
        if base.endswith("@table") and table is not None
        else contextlib.nullcontext()
    )
    fusions = fusion.using(fused) if fused else contextlib.nullcontext()
    with mode_context(mode), tables, fusions:
        runner.eager_decode(slot, rows)  # compiles this mode's kernels outside the capture
        torch.cuda.synchronize()
        with torch.cuda.graph(graph):
            runner.eager_decode(slot, rows)
    torch.cuda.synchronize()
    return graph


def kernel_us(graph: torch.cuda.CUDAGraph) -> dict[str, float]:
    """Device time of one replay by kernel name (the 12 largest): which kernels PDL moved."""
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        graph.replay()
        torch.cuda.synchronize()
    total: collections.Counter[str] = collections.Counter()
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            total[e.name[:60]] += e.time_range.elapsed_us()
    return {k: round(v, 1) for k, v in total.most_common(12)}


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
