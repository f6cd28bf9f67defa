"""Run-to-run variance of a configuration's wall time (issue #25 item 1), in one process.

One engine (one model load, one graph capture), then repeats of the same workload (the same seed:
the same requests, so the same steps) at every stream count and depth, interleaved: repeat-major,
stream counts in turn, the depth order alternating between repeats (bubblelab.runs.variance). Per
configuration: every repeat's wall, the median, the coefficient of variation (CV), and each repeat
more than 3% from the median with what its timed region met (runs.region: compiles, captures, new
shapes, collections, allocator growth, clocks, slow steps) and what differed in its timeline from
the median repeat's, step by step (which steps; the GPU working, the GPU idle or the host working).
Targets: CV <= 1% at every stream count, no repeat over 3% from the median.

    python -m benchmarks.variance --model qwen3-0.6b --streams 1,8,32,96,128 --repeats 7 --out $OUT
    python -m benchmarks.variance --device cpu --model tiny-qwen3 --streams 1,4 --repeats 3 \\
        --output-len 8 --decode-steps 40 --out /tmp/var

Writes OUT/variance.json (everything), OUT/variance.md (the table) and, with --keep-records, each
run's record (summary and timeline) under OUT/runs/. --budget-s: no repeat starts after it (the
JSON says how many ran).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

from bubblelab.core.files import write_atomic
from bubblelab.core.timeline import Timeline
from bubblelab.engine.config import EngineConfig, default_dtype
from bubblelab.engine.llm_engine import LLMEngine
from bubblelab.engine.loader import load_model
from bubblelab.runs.driver import RunResult
from bubblelab.runs.machine import machine_facts
from bubblelab.runs.variance import CV_TARGET, OFF_TARGET, configuration, markdown, measure
from bubblelab.runs.worker import result_record
from bubblelab.runs.workload import WorkloadSpec


def main() -> None:
    a = parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    dtype = a.dtype or default_dtype(a.device)
    loaded = load_model(a.model, dtype=dtype, device=a.device, seed=0,
                        attention_backend=a.attention_backend)  # fmt: skip
    config = EngineConfig(model=a.model, device=a.device, dtype=dtype, depth=1,
                          max_num_seqs=max(8, *a.streams), max_model_len=a.max_model_len,
                          attention_backend=a.attention_backend)  # fmt: skip
    engine = LLMEngine(config, loaded, timeline=Timeline())
    setup_s = time.perf_counter() - t0
    print(f"{a.model} on {a.device}: loaded, compiled and captured in {setup_s:.1f} s", flush=True)

    def said(r: int, s: int, depth: int, result: RunResult) -> None:
        w = result.summary
        print(f"r{r} s{s} d{depth}: {w['wall_s']:.3f} s {'; '.join(w['timing_flags'])}", flush=True)
        if a.keep_records:
            write_atomic(out / "runs" / f"s{s}-d{depth}-r{r}.json",
                         json.dumps(result_record(result)))  # fmt: skip

    workloads = {s: workload(a, s) for s in a.streams}
    budget = max(0.0, a.budget_s - setup_s)
    runs, repeats_run = measure(engine, workloads, a.depths, a.repeats, budget, on_run=said)
    engine.close()
    doc = {
        "command": a.command, "model": a.model, "device": a.device, "dtype": dtype,
        "attention_backend": loaded.model.attn_backend.name,
        "compiled": loaded.model.compile_enabled, "machine": machine_facts(),
        "repeats_asked": a.repeats, "repeats_run": repeats_run, "setup_s": setup_s,
        "wall_s": time.perf_counter() - t0, "targets": {"cv": CV_TARGET, "off": OFF_TARGET},
        "configurations": [configuration(s, d, rs) for (s, d), rs in sorted(runs.items())],
    }  # fmt: skip
    doc["met"] = all(c["met"] for c in doc["configurations"])
    write_atomic(out / "variance.json", json.dumps(doc, indent=1))
    table = markdown(doc)
    write_atomic(out / "variance.md", table)
    print(table)


def workload(a: argparse.Namespace, streams: int) -> WorkloadSpec:
    """The same requests every repeat (one seed): a repeat differs from another only by noise."""
    per_stream = max(2, math.ceil(a.decode_steps / a.output_len))
    return WorkloadSpec(
        streams=streams, requests=streams * per_stream, output_len_mean=a.output_len,
        prompt_len=a.prompt_len, seed=a.seed,
    )  # fmt: skip


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default="qwen3-0.6b")
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default=None)
    p.add_argument("--attention-backend", default="auto")
    p.add_argument("--streams", default="1,8,32,96,128")
    p.add_argument("--depths", default="1,2")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--output-len", type=float, default=50.0, help="mean output length L")
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument(
        "--decode-steps",
        type=int,
        default=300,
        help="about this many decode steps a run: requests = streams x ceil(this / L)",
    )
    p.add_argument("--max-model-len", type=int, default=512)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--budget-s", type=float, default=260.0, help="no repeat starts after this")
    p.add_argument("--keep-records", action="store_true", help="each run's record in OUT/runs/")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    a.command = "python -m benchmarks.variance " + " ".join(
        f"--{k.replace('_', '-')} {v}" for k, v in vars(a).items() if v not in (None, False)
    )
    a.streams = [int(x) for x in a.streams.split(",")]
    a.depths = [int(x) for x in a.depths.split(",")]
    return a


if __name__ == "__main__":
    main()
