"""What a GPU engine's set-up spends capturing CUDA graphs, by its prefill token budget.

Each engine captures a prefill graph per token bucket up to max_num_batched_tokens
(engine.cuda_graphs.prefill_buckets), and warms up and replays each one per slot: the large
buckets are most of a warm engine's set-up, and every worker process of a sweep pays it once.
Loads the model once, then builds and closes an engine per budget in turn (the first pays the
process's compiles too), timing CudaGraphs.capture (synchronised) and the whole construction, with
capture's parts and the process's torch.compile cache hits and misses so far.

    python -m benchmarks.capture_cost [--model qwen3-4b] [--rows 32] [--budgets 8192,8192,2048,1024,8192,2048] [--out FILE.json]
"""  # noqa: E501

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from bubblelab.core.files import write_atomic
from bubblelab.core.timeline import Timeline
from bubblelab.engine import cuda_graphs
from bubblelab.engine.config import EngineConfig
from bubblelab.engine.llm_engine import LLMEngine
from bubblelab.engine.loader import load_model
from bubblelab.runs.worker import compile_counters


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen3-4b")
    ap.add_argument(
        "--rows", type=int, default=32, help="max_num_seqs (the sweep's largest streams)"
    )
    ap.add_argument("--budgets", default="8192,8192,2048,1024,8192,2048")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    spent: dict = {}
    capture = cuda_graphs.CudaGraphs.capture

    def timed(self, *a, **k) -> None:
        torch.cuda.synchronize()
        started = time.perf_counter()
        capture(self, *a, **k)
        torch.cuda.synchronize()
        spent.update(capture_s=time.perf_counter() - started, buckets=list(self.buckets),
                     token_buckets=list(self.token_buckets))  # fmt: skip

    cuda_graphs.CudaGraphs.capture = timed  # type: ignore[method-assign]  # timed, for this process
    started = time.perf_counter()
    loaded = load_model(args.model, dtype="bf16", device="cuda", seed=0, attention_backend="auto")
    rows = [{"load_s": round(time.perf_counter() - started, 3)}]
    for budget in (int(b) for b in args.budgets.split(",")):
        spent.clear()
        started = time.perf_counter()
        config = EngineConfig(model=args.model, device="cuda", dtype="bf16", max_num_seqs=args.rows,
                              max_model_len=512, max_num_batched_tokens=budget)  # fmt: skip
        engine = LLMEngine(config, loaded, timeline=Timeline())
        took = round(time.perf_counter() - started, 3)
        row = {"max_num_batched_tokens": budget, "engine_s": took, **spent}
        row |= {"parts_s": dict(engine.runner.graphs.parts_s), "compile": compile_counters()}
        engine.close()
        torch.cuda.empty_cache()
        print(json.dumps(row), flush=True)
        rows.append(row)
    if args.out:
        write_atomic(args.out, json.dumps({"gpu": torch.cuda.get_device_name(), "rows": rows},
                                          indent=1) + "\n")  # fmt: skip


if __name__ == "__main__":
    main()
