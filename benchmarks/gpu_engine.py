"""GPU acceptance run for the engine and the pipeline (issues Engine and Pipelined decoding), in one process.

For each preset (bf16, seeded random weights): CUDA graphs replay (counted), greedy graph == eager and
depth 1 == depth 2 token for token, GPU memory after warm-up does not grow, no host synchronisation in a
steady-state depth-2 run (torch.cuda.set_sync_debug_mode("error")), then depth 1 vs depth 2 back to back at
1, 8 and 32 streams with repeats: step period, forward, sampling, idle per decode step (the engine's own
CUDA-event timing), tokens/s. Writes one JSON per preset to --out.

    python benchmarks/gpu_engine.py --presets qwen3-0.6b,qwen3-4b --out $OUT
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from bubblelab.engine.config import EngineConfig
from bubblelab.engine.driver import run_workload
from bubblelab.engine.llm_engine import LLMEngine
from bubblelab.engine.loader import load_model
from bubblelab.engine.sampling_params import SamplingParams
from bubblelab.engine.timeline import Timeline
from bubblelab.engine.workload import WorkloadSpec
from bubblelab.profiling.analysis import per_step_from_timeline, steady_state

DEVICE = "cuda"


def engine_for(
    loaded, preset: str, depth: int, eager: bool = False, max_num_seqs: int = 32
) -> LLMEngine:
    cfg = EngineConfig(
        model=preset,
        device=DEVICE,
        dtype="bf16" if DEVICE == "cuda" else "fp32",
        depth=depth,
        max_num_seqs=max_num_seqs,
        max_model_len=256,
        enforce_eager=eager,
    )
    return LLMEngine(cfg, loaded, timeline=Timeline())


def greedy_tokens(engine: LLMEngine, n: int = 8, max_tokens: int = 48) -> dict[str, list[int]]:
    rng = np.random.default_rng(0)
    for i in range(n):
        engine.add_request(
            f"g{i}",
            rng.integers(100, min(5000, engine.loaded.config.vocab_size), 16 + 3 * i).tolist(),
            SamplingParams(max_tokens=max_tokens, ignore_eos=True),
        )
    out = {}
    while engine.has_unfinished():
        for o in engine.step():
            if o.finished:
                out[o.request_id] = o.token_ids
                engine.seqs.pop(o.request_id)
    return out


def first_mismatches(a: dict, b: dict) -> dict:
    """Per request, the first position where two greedy runs differ (only the requests that differ)."""
    return {
        k: next((i for i, (x, y) in enumerate(zip(v, b[k])) if x != y), min(len(v), len(b[k])))
        for k, v in a.items()
        if v != b[k]
    }


def step_stats(result, depth: int) -> dict:
    steps = per_step_from_timeline(result.timeline, "run", depth)
    steady = steady_state(steps)
    med = {
        k: float(np.median(steady[k]))
        for k in ("forward_ms", "sampling_ms", "bubble_ms", "period_ms")
    }
    med["bubble_p90_ms"] = float(np.percentile(steady["bubble_ms"], 90))
    med["steady_steps"] = int(len(steady))
    return med


def check_preset(preset: str, streams_list: list[int], repeats: int, L: float) -> dict:
    t0 = time.perf_counter()
    loaded = load_model(preset, dtype="bf16" if DEVICE == "cuda" else "fp32", device=DEVICE, seed=0)
    cuda = DEVICE == "cuda"
    report: dict = {
        "preset": preset,
        "gpu": torch.cuda.get_device_name() if cuda else "cpu",
        "torch": torch.__version__,
        "load_s": time.perf_counter() - t0,
        "attention_backend": loaded.model.attn_backend.name,
    }
    # 1. graphs replay, graph == eager, depth 1 == depth 2
    eng = engine_for(loaded, preset, 2)
    graph_out = greedy_tokens(eng)
    report["graph_replays"] = eng.runner.graphs.decode_replays
    report["compiled"] = loaded.model.compile_enabled
    report["graph_buckets"] = sorted(eng.runner.graphs.decode_graphs[0])
    eng.close()
    eager = engine_for(loaded, preset, 2, eager=True)
    eager_out = greedy_tokens(eager)
    eager.close()
    d1 = engine_for(loaded, preset, 1)
    d1_out = greedy_tokens(d1)
    d1_again = greedy_tokens(d1)  # the same engine twice: is the GPU itself deterministic here?
    d1.close()
    d2 = engine_for(loaded, preset, 2)
    d2_again = greedy_tokens(d2)
    d2.close()
    report["graph_equals_eager"] = graph_out == eager_out
    report["depth1_equals_depth2"] = graph_out == d1_out
    report["depth1_repeatable"] = d1_out == d1_again
    report["depth2_repeatable"] = graph_out == d2_again
    report["mismatches"] = {
        name: first_mismatches(a, b)
        for name, (a, b) in {
            "graph_vs_eager": (graph_out, eager_out),
            "depth1_vs_depth2": (d1_out, graph_out),
            "depth1_vs_depth1": (d1_out, d1_again),
            "depth2_vs_depth2": (graph_out, d2_again),
        }.items()
    }
    # 2. memory after warm-up, 3. sync debug mode, 4. depth 1 vs 2 back to back
    rows = []
    engines = {
        d: engine_for(loaded, preset, d) for d in (1, 2)
    }  # each step() rebinds its own KV pool
    for d, e in engines.items():  # warm-up every bucket we will use
        run_workload(
            e,
            WorkloadSpec(
                streams=max(streams_list),
                requests=max(streams_list),
                output_len_mean=16,
                output_len_dist="fixed",
            ),
            warmup=True,
        )
    if cuda:
        torch.cuda.synchronize()
    mem0 = {}
    if cuda:
        torch.cuda.set_sync_debug_mode("error")
    try:
        run_workload(
            engines[2], WorkloadSpec(streams=8, requests=16, output_len_mean=64), warmup=False
        )
        report["sync_debug_error_mode"] = "no synchronisation raised"
    except RuntimeError as e:
        report["sync_debug_error_mode"] = f"RAISED: {str(e).splitlines()[0]}"
    finally:
        if cuda:
            torch.cuda.set_sync_debug_mode("default")
    for r in range(repeats):
        for s in streams_list:
            for d in (1, 2):
                res = run_workload(
                    engines[d],
                    WorkloadSpec(streams=s, requests=4 * s, output_len_mean=L, seed=r),
                    warmup=False,
                )
                row = {
                    "streams": s,
                    "depth": d,
                    "repeat": r,
                    "tokens_per_s": res.summary["tokens_per_s"],
                    "wall_s": res.summary["wall_s"],
                    "mean_L": res.summary["mean_generated_len"],
                    **step_stats(res, d),
                }
                rows.append(row)
                print(json.dumps(row), flush=True)
        if r == 0 and cuda:  # every shape has now run once: from here on memory must stay flat
            torch.cuda.synchronize()
            mem0 = torch.cuda.memory_stats()
    mem1 = torch.cuda.memory_stats() if cuda else {}
    keys = ("reserved_bytes.all.current", "segment.all.allocated", "allocated_bytes.all.peak")
    report["memory_after_warmup"] = {k: mem0.get(k) for k in keys}
    report["memory_after_runs"] = {k: mem1.get(k) for k in keys}
    report["memory_grew"] = bool(cuda and mem0) and any(mem1[k] > mem0[k] for k in keys[:2])
    report["graph_replays_total"] = sum(e.runner.graphs.decode_replays for e in engines.values())
    for e in engines.values():
        e.close()
    report["runs"] = rows
    return report


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--presets", default="qwen3-0.6b,qwen3-4b")
    ap.add_argument("--streams", default="1,8,32")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--L", type=float, default=110.0)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument(
        "--checks-only", action="store_true", help="Correctness checks, no throughput sweep."
    )
    a = ap.parse_args()
    global DEVICE
    DEVICE = a.device
    a.out.mkdir(parents=True, exist_ok=True)
    for preset in a.presets.split(","):
        rep = check_preset(
            preset, [int(x) for x in a.streams.split(",")], 0 if a.checks_only else a.repeats, a.L
        )
        (a.out / f"engine-{preset}.json").write_text(json.dumps(rep, indent=1))
        print(json.dumps({k: v for k, v in rep.items() if k != "runs"}, indent=1), flush=True)


if __name__ == "__main__":
    main()
