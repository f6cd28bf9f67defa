"""Tensor parallel 1 vs 2, depth 1 vs 2, per rank (issue #18): tokens/s, step time and each rank's
bubble, for each preset and stream count, with interleaved repeats.

Per preset (bf16, seeded random weights) one TP-1 engine (this process, GPU 0) and one TP-2 engine
(this process as rank 0 on GPU 0, a worker on GPU 1) stay alive side by side, each serving both
depths (LLMEngine.set_depth). A repeat runs every stream count, and per stream count TP 1 and
TP 2, depth 1 then depth 2, back to back: one repeat's configurations see the same machine state.
Workload: `streams` closed-loop streams, `--requests-per-stream` requests each (3 at one stream),
32-token prompts, output lengths uniform on [L/2, 3L/2].

Per run and rank, steady-state medians from that rank's own timeline (profiling.analysis): forward,
sampling, bubble (GPU idle between the step's spans) and period; rank 0's `handoff` host range. The
JSON is rewritten after every run, so a run cut short by the deadline keeps what it measured.

    python -m benchmarks.tp_sweep --presets qwen3-32b,qwen3-8b --deadline-s 420 --out $OUT/tp.json
    python -m benchmarks.tp_sweep --device cpu --presets tiny-qwen3 --streams 1,4 --L 8 \
        --kv-pages 256 --out /tmp/tp.json
"""

from __future__ import annotations

import argparse
import gc
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from bubblelab.core.files import write_atomic
from bubblelab.core.timeline import Timeline
from bubblelab.engine.config import EngineConfig
from bubblelab.engine.llm_engine import LLMEngine
from bubblelab.profiling.analysis import per_step_from_timeline, steady_state
from bubblelab.runs.driver import RunResult, run_workload
from bubblelab.runs.workload import WorkloadSpec

STEP_COLUMNS = ("forward_ms", "sampling_ms", "bubble_ms", "period_ms")


def rank_stats(timeline: Timeline, depth: int) -> dict:
    steps = steady_state(per_step_from_timeline(timeline, "run", depth))
    steps = steps[steps.kind == "decode"]
    stats = {k: float(np.median(steps[k])) for k in STEP_COLUMNS if len(steps)}
    stats["steady_steps"] = int(len(steps))
    host = timeline.host_frame()
    for phase in ("handoff", "recv", "launch"):
        d = (host[host.phase == phase].end_ns - host[host.phase == phase].start_ns) / 1e3
        if len(d):
            stats[f"{phase}_us_median"] = float(np.median(d))
    return stats


def run_row(result: RunResult, preset: str, tp: int, repeat: int) -> dict:
    s = result.summary
    depth = s["depth"]
    ranks = [result.timeline, *result.rank_timelines]
    return {
        "preset": preset, "tp": tp, "depth": depth, "streams": s["streams"], "repeat": repeat,
        "tokens_per_s": s["tokens_per_s"], "wall_s": s["wall_s"],
        "step_ms_median": s["step_ms_median"],
        "decode_steps": s["decode_steps"], "mean_L": s["mean_generated_len"],
        "sm_clock_mhz_median": s.get("sm_clock_mhz_median"),
        "ranks": [{"rank": r, **rank_stats(t, depth)} for r, t in enumerate(ranks)],
    }  # fmt: skip


def make_engine(preset: str, tp: int, args: argparse.Namespace) -> tuple[LLMEngine, float]:
    t0 = time.perf_counter()
    config = EngineConfig(
        model=preset, device=args.device, depth=2, tensor_parallel=tp,
        max_num_seqs=max(args.streams), max_model_len=args.max_model_len,
        max_num_batched_tokens=args.max_batched_tokens, num_kv_blocks=args.kv_pages,
    )  # fmt: skip
    return LLMEngine(config, timeline=Timeline()), time.perf_counter() - t0


def summary_table(rows: list[dict]) -> list[dict]:
    """Medians over repeats per (preset, streams, tp, depth), with the TP-2 / TP-1 step ratio."""
    per_rank = ("forward_ms", "bubble_ms")
    flat = pd.DataFrame(
        [{**{k: v for k, v in r.items() if k != "ranks"},
          **{f"r{x['rank']}_{k}": x.get(k) for x in r["ranks"] for k in per_rank}}
         for r in rows]
    )  # fmt: skip
    if flat.empty:
        return []
    keys = ["preset", "streams", "tp", "depth"]
    value_cols = ["tokens_per_s", "step_ms_median", *(c for c in flat if c[0] == "r" and "_" in c)]
    table = flat.groupby(keys)[value_cols].median().reset_index()
    table["runs"] = flat.groupby(keys).size().values
    tp1 = table[table.tp == 1].set_index(["preset", "streams", "depth"]).step_ms_median
    index = pd.MultiIndex.from_frame(table[["preset", "streams", "depth"]])
    table["step_vs_tp1"] = table.step_ms_median.values / tp1.reindex(index).values
    return json.loads(table.to_json(orient="records"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--presets", default="qwen3-32b,qwen3-8b")
    ap.add_argument("--streams", default="1,8,32,128")
    ap.add_argument("--tp", default="1,2")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--L", type=float, default=64.0)
    ap.add_argument("--requests-per-stream", type=int, default=1)
    ap.add_argument("--max-model-len", type=int, default=256)
    ap.add_argument("--max-batched-tokens", type=int, default=4096)
    ap.add_argument("--kv-pages", type=int, default=2304, help="per engine (two share GPU 0)")
    ap.add_argument("--deadline-s", type=float, default=1e9, help="no run starts after this")
    ap.add_argument(
        "--preset-min-s", type=float, default=0, help="a preset starts only with this left"
    )
    ap.add_argument(
        "--separate-tp",
        action="store_true",
        help="one TP size's engine at a time (repeats not interleaved across sizes): for a model "
        "whose TP-1 and TP-2 engines do not fit GPU 0 together (qwen3-32b on 80 GB)",
    )
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.streams = [int(s) for s in args.streams.split(",")]
    started = time.perf_counter()
    late = lambda: time.perf_counter() - started > args.deadline_s  # noqa: E731
    doc: dict = {"gpu": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
                 "torch": torch.__version__, "args": {k: str(v) for k, v in vars(args).items()},
                 "engines": [], "runs": []}  # fmt: skip

    def save() -> None:
        doc["summary"] = summary_table(doc["runs"])
        doc["elapsed_s"] = time.perf_counter() - started
        write_atomic(args.out, json.dumps(doc, indent=1))

    for preset in args.presets.split(","):
        left = args.deadline_s - (time.perf_counter() - started)
        if left < args.preset_min_s:  # engines alone take minutes: skip what cannot finish a repeat
            print(f"{preset}: skipped, {left:.0f} s left before the deadline", flush=True)
            continue
        sizes = [int(t) for t in args.tp.split(",")]
        for group in [[tp] for tp in sizes] if args.separate_tp else [sizes]:
            run_group(preset, group, args, doc, late, save)
            # the closed engines' memory is free only once their cycles are collected: without
            # this the TP-2 engine of qwen3-32b met the TP-1 one's 78 GB on GPU 0
            gc.collect()
            if args.device == "cuda":
                torch.cuda.empty_cache()
    save()
    for e in doc["summary"]:
        ratio = f"  x{e['step_vs_tp1']:.2f} of tp1" if e["tp"] != 1 and e["step_vs_tp1"] else ""
        print(f"{e['preset']:>10} s{e['streams']:<4} tp{e['tp']} d{e['depth']}: "
              f"{e['tokens_per_s']:8.0f} tok/s  "
              f"step {e['step_ms_median']:7.3f} ms{ratio}")  # fmt: skip


def run_group(
    preset: str, sizes: list[int], args: argparse.Namespace, doc: dict, late, save
) -> None:
    """The engines of `sizes` alive side by side; every repeat runs every stream count, TP size
    and depth back to back, so one repeat's configurations see the same machine state."""
    engines = {}
    try:
        for tp in sizes:
            engines[tp], init_s = make_engine(preset, tp, args)
            doc["engines"].append({"preset": preset, "tp": tp, "init_s": init_s})
            print(f"{preset} tp{tp}: engine ready in {init_s:.1f} s", flush=True)
        for repeat in range(args.repeats):
            for streams in args.streams:
                for tp, engine in engines.items():
                    for depth in (1, 2):
                        if late():
                            break
                        engine.set_depth(depth)
                        spec = WorkloadSpec(
                            streams=streams, output_len_mean=args.L, prompt_len=32, seed=repeat,
                            requests=streams * (3 if streams == 1 else args.requests_per_stream),
                        )  # fmt: skip
                        row = run_row(run_workload(engine, spec), preset, tp, repeat)
                        doc["runs"].append(row)
                        save()
                        bubbles = " ".join(f"{r.get('bubble_ms', float('nan')):.3f}"
                                           for r in row["ranks"])  # fmt: skip
                        print(f"{preset} s{streams} tp{tp} d{depth} r{repeat}: "
                              f"{row['tokens_per_s']:.0f} tok/s, "
                              f"step {row['step_ms_median']:.3f} ms, "
                              f"bubble/rank {bubbles} ms", flush=True)  # fmt: skip
        for engine in engines.values():
            engine.check_idle()
    finally:
        while engines:  # no loop variable left holding an engine
            engines.popitem()[1].close()


if __name__ == "__main__":
    main()
