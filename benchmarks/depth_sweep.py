"""Pipelined decoding: depth 1 vs depth 2 back to back on the same weights, in one process.

For each preset (seeded random weights, bf16 on CUDA): one engine per depth, every bucket warmed up,
then per repeat and stream count (default 1, 8 and 32) a closed loop of 4 x streams requests at both
depths: step period, forward, sampling and idle per steady-state decode step (the engine's own
CUDA-event timing) and tokens/s. Writes engine-<preset>.json per preset to --out;
`python -m tools.docs.engine_table` makes the markdown table from them. The correctness side
(graphs, graph == eager, depth 1 == depth 2, no host syncs, flat memory) is
tests/test_engine_acceptance.py.

    python -m benchmarks.depth_sweep --presets qwen3-0.6b,qwen3-4b --out $OUT
    python -m benchmarks.depth_sweep --device cpu --presets tiny-qwen3 --streams 1,2 --repeats 1 \\
        --L 8 --out x
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from bubblelab.core.files import write_atomic
from bubblelab.core.timeline import Timeline
from bubblelab.engine.config import EngineConfig, default_dtype
from bubblelab.engine.llm_engine import LLMEngine
from bubblelab.engine.loader import LoadedModel, load_model
from bubblelab.profiling.analysis import per_step_from_timeline, steady_state
from bubblelab.runs.driver import RunResult, run_workload
from bubblelab.runs.workload import WorkloadSpec


def engine_for(
    loaded: LoadedModel, device: str, dtype: str, depth: int, num_kv_blocks: int | None = None
) -> LLMEngine:
    cfg = EngineConfig(
        model=loaded.name,
        device=device,
        dtype=dtype,
        depth=depth,
        max_num_seqs=32,
        max_model_len=256,
        num_kv_blocks=num_kv_blocks,
    )
    return LLMEngine(cfg, loaded, timeline=Timeline())


def step_stats(result: RunResult, depth: int) -> dict:
    steady = steady_state(per_step_from_timeline(result.timeline, "run", depth))
    med = {
        k: float(np.median(steady[k]))
        for k in ("forward_ms", "sampling_ms", "bubble_ms", "period_ms")
    }
    med["bubble_p90_ms"] = float(np.percentile(steady["bubble_ms"], 90))
    med["steady_steps"] = int(len(steady))
    return med


def sweep_preset(preset: str, device: str, streams_list: list[int], repeats: int, L: float) -> dict:
    cuda = device == "cuda"
    dtype = default_dtype(device)
    t0 = time.perf_counter()
    loaded = load_model(preset, dtype=dtype, device=device, seed=0)
    engines = {d: engine_for(loaded, device, dtype, d) for d in (1, 2)}
    report: dict = {
        "preset": preset,
        "gpu": torch.cuda.get_device_name() if cuda else "cpu",
        "torch": torch.__version__,
        "load_s": time.perf_counter() - t0,
        "attention_backend": loaded.model.attn_backend.name,
        "compiled": loaded.model.compile_enabled,
        "graph_buckets": sorted(engines[2].runner.graphs.decode_graphs[0]),
    }
    for engine in engines.values():  # warm up every bucket the runs below use
        warmup = WorkloadSpec(
            streams=max(streams_list),
            requests=max(streams_list),
            output_len_mean=16,
            output_len_dist="fixed",
        )
        run_workload(engine, warmup, warmup=True)
    rows = []
    for r in range(repeats):
        for s in streams_list:
            for d, engine in engines.items():
                spec = WorkloadSpec(streams=s, requests=4 * s, output_len_mean=L, seed=r)
                res = run_workload(engine, spec, warmup=False)
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
    report["graph_replays_total"] = sum(e.runner.graphs.decode_replays for e in engines.values())
    for engine in engines.values():
        engine.close()
    report["runs"] = rows
    return report


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--presets", default="qwen3-0.6b,qwen3-4b")
    ap.add_argument("--streams", default="1,8,32")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--L", type=float, default=110.0, help="mean output length")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    for preset in a.presets.split(","):
        streams = [int(x) for x in a.streams.split(",")]
        report = sweep_preset(preset, a.device, streams, a.repeats, a.L)
        write_atomic(a.out / f"engine-{preset}.json", json.dumps(report, indent=1))
        print(json.dumps({k: v for k, v in report.items() if k != "runs"}, indent=1), flush=True)


if __name__ == "__main__":
    main()
