"""Where the two instruments disagree about PDL: the engine's own timeline against the decode graph
replayed back to back (benchmarks/pdl_ab.py), on the same engine's runner.

For one preset and stream count, per round and PDL mode (alternating): an engine at depth 2 is
built with graphs captured in that mode and a closed loop is timed by the engine's timeline. Then
the same runner's decode forward of `streams` rows is captured again and replayed back to back as
pdl_ab times it, interleaved with the engine's own graph of that bucket replayed the same way over
the same inputs. If the two replays agree with each other and not with the engine, what differs is
how the graph runs inside the engine (sampling between forwards, two slots), not the graph. With
--trace, each instrument's kernels (name, grid, start, duration) of a few steps are written for a
kernel-by-kernel comparison. With --pdl-ab-runners, pdl_ab's own runner replays beside them
(over the engine's weights and over its own load): on one H200 it timed within 0.7% of the
engine's runner in both modes. pdl_ab's smaller PDL gain came from its process instead: the
PDL-off one-row step moved by up to 5.7% between processes (docs/engine-speed.md).

    python -m benchmarks.pdl_where --preset qwen3-4b --streams 1 --out $OUT/where
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from bubblelab.core.files import write_atomic
from bubblelab.engine.config import default_dtype
from bubblelab.engine.loader import load_model
from bubblelab.runs.driver import run_workload
from bubblelab.runs.workload import WorkloadSpec

from .depth_sweep import engine_for, step_stats
from .forward_kernels import build_runner, emit, fill_decode_rows, load
from .pdl_ab import capture, mode_context, time_block


def kernels(prof) -> list[list]:
    """The profiled kernels in start order: [name, grid, start us, duration us]."""
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        events = json.loads(Path(f.name).read_text())["traceEvents"]
    rows = [
        [e["name"][:80], e.get("args", {}).get("grid"), e["ts"], e["dur"]]
        for e in events
        if e.get("cat") == "kernel"
    ]
    rows.sort(key=lambda r: r[2])
    t0 = rows[0][2] if rows else 0.0
    return [[n, g, round(ts - t0, 2), round(d, 2)] for n, g, ts, d in rows]


def replayed_kernels(graph: torch.cuda.CUDAGraph, replays: int = 3) -> list[list]:
    """kernels() of `replays` back-to-back replays of a graph."""
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            graph.replay()
        torch.cuda.synchronize()
    return kernels(prof)


def time_loop(pairs: list, steps: int) -> float:
    """Milliseconds a step over `steps` (forward, sampling) graph pairs, cycling through `pairs`."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for forward, sample in pairs:
        forward.replay()
        sample.replay()
    start.record()
    for i in range(steps):
        forward, sample = pairs[i % len(pairs)]
        forward.replay()
        sample.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / steps


def bench_runners(loaded, streams: int, mode: str, args) -> dict[str, tuple]:
    """pdl_ab's runner (sized for these rows and twice the context) over the engine's weights, and
    pdl_ab's whole set-up (its own load, Triton attention): (runner, its decode graph in `mode`)
    each, over the same rows. Tells a difference of runner configuration from one of loading."""
    out = {}
    for name, model in (
        ("pdl_ab_runner_ms", loaded),
        ("pdl_ab_setup_ms", load(args.preset, "cuda", "triton")),
    ):
        runner = build_runner(model, args.preset, "cuda", streams, 2 * args.context, "triton")
        fill_decode_rows(runner, runner.slots[0], streams, args.context)
        out[name] = (runner, capture(runner, runner.slots[0], streams, mode))
    return out


def one_round(loaded, dtype: str, streams: int, mode: str, args) -> tuple[dict, dict]:
    """One engine with its graphs captured in `mode` ('engine': the default policy)."""
    with mode_context(mode):
        engine = engine_for(loaded, "cuda", dtype, 2, args.num_kv_blocks)
        spec = WorkloadSpec(streams=streams, requests=4 * streams, output_len_mean=args.L)
        run_workload(engine, spec, warmup=True)
        res = run_workload(engine, spec, warmup=False)
        row: dict[str, Any] = {"mode": mode, "tokens_per_s": res.summary["tokens_per_s"]}
        row |= {f"engine_{k}": v for k, v in step_stats(res, 2).items()}
        traces: dict[str, list] = {}
        if args.trace:
            short = WorkloadSpec(
                streams=streams, requests=streams, output_len_mean=12, output_len_dist="fixed"
            )
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                run_workload(engine, short, warmup=False)
                torch.cuda.synchronize()
            traces["engine"] = kernels(prof)
        runner = engine.runner
        slot = runner.slots[0]
        fill_decode_rows(runner, slot, streams, args.context)
        graph = capture(runner, slot, streams, mode)
        # The engine's own graph of this bucket, captured when the engine was built, replayed the
        # same way over the same inputs: the graph or the way it runs?
        bucket = runner.graphs.decode_bucket(streams)
        assert bucket is not None, "the engine captured no decode graph for these rows"
        own = runner.graphs.decode_graphs[slot.index][bucket]
        # And the engine's graphs as its loop runs them, without the host: each forward followed
        # by its greedy sampling graph, on one slot or alternating the two.
        for other in runner.slots[1:]:
            fill_decode_rows(runner, other, streams, args.context)
        g = runner.graphs
        steps = {
            f"{name}_ms": [
                (g.decode_graphs[s][bucket], g.sample_graphs[s][(bucket, True, False)])
                for s in slots
            ]
            for name, slots in (("loop_one_slot", [0]), ("loop_two_slots", [0, 1]))
        }
        others = bench_runners(loaded, streams, mode, args) if args.pdl_ab_runners else {}
        times: dict[str, list[float]] = {"replayed_ms": [], "engine_graph_replayed_ms": []}
        times |= {k: [] for k in [*steps, *others]}
        for _ in range(args.rounds):
            times["replayed_ms"].append(time_block(graph, args.replays))
            times["engine_graph_replayed_ms"].append(time_block(own, args.replays))
            for k, pairs in steps.items():
                times[k].append(time_loop(pairs, args.replays))
            for k, (_, other_graph) in others.items():
                times[k].append(time_block(other_graph, args.replays))
        for k, ts in times.items():
            row[k] = round(statistics.median(ts), 4)
        row["replayed_range_ms"] = [
            round(min(times["replayed_ms"]), 4),
            round(max(times["replayed_ms"]), 4),
        ]
        if args.trace:
            traces["replayed"] = replayed_kernels(graph)
            for k, (_, other_graph) in others.items():
                traces[k.removesuffix("_ms")] = replayed_kernels(other_graph)
        del graph
        for other_runner, _ in others.values():
            other_runner.close()
        engine.close()
    gc.collect()
    torch.cuda.empty_cache()
    return row, traces


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--preset", default="qwen3-4b")
    ap.add_argument("--streams", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=2, help="rounds of every mode in --modes")
    ap.add_argument("--L", type=float, default=110.0, help="mean output length")
    ap.add_argument("--context", type=int, default=110, help="tokens of the replayed rows")
    ap.add_argument("--rounds", type=int, default=9, help="timed blocks of the replayed graph")
    ap.add_argument("--replays", type=int, default=20)
    ap.add_argument("--trace", action="store_true", help="write each instrument's kernels")
    ap.add_argument("--modes", default="off,engine", help="PDL modes, alternating by round")
    ap.add_argument(
        "--pdl-ab-runners",
        action="store_true",
        help="also replay pdl_ab's runner (the engine's weights, then pdl_ab's own load)",
    )
    ap.add_argument(
        "--num-kv-blocks", type=int, default=None, help="the K/V pool (default: by GPU memory)"
    )
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("pdl_where needs a CUDA GPU")
    dtype = default_dtype("cuda")
    loaded = load_model(args.preset, dtype=dtype, device="cuda", seed=0)
    rows, modes = [], args.modes.split(",")
    for r in range(args.repeats):
        for mode in modes if r % 2 == 0 else modes[::-1]:
            row, traces = one_round(loaded, dtype, args.streams, mode, args)
            rows.append(row | {"repeat": r})
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
            for name, ks in traces.items():
                path = args.out / f"kernels-{args.preset}-s{args.streams}-{mode}-{r}-{name}.json"
                write_atomic(path, json.dumps(ks))
    summary = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "preset": args.preset,
        "streams": args.streams,
        "num_kv_blocks": args.num_kv_blocks,
        "rows": rows,
    }
    emit(summary, args.out / f"where-{args.preset}-s{args.streams}.json")


if __name__ == "__main__":
    main()
