"""Prefill on the GPU's clock? Host time to launch one prefill and its GPU time, against tokens and
rows.

For each preset (bf16, seeded random weights) and engine variant, a prefill of `rows` prompts of
`tokens / rows` tokens runs through the real engine (LLMEngine.step: admission, launch, sampling,
commit), one prefill at a time, and the engine's own timeline gives:
  host_ms   the `launch` phase of the prefill step (inputs filled, one upload, the forward
            enqueued);
  gpu_ms    the forward's device span (CUDA events inside the captured graph, or around the eager
            forward);
  busy_pct  gpu_ms over the interval from the launch's start to the forward's end: the share of a
            prefill's period the GPU works when prefills come back to back (>= 95%: GPU-bound).
Variants: `graph` (the default: CUDA graphs per token bucket, Triton attention), `eager-triton` and
`eager-torch` (no graphs; torch = PyTorch's FA2 varlen op), so the table shows what capture buys.
Median of --repeats after --warmup; the spread is in the JSON.

    python -m benchmarks.prefill_bench --out prefill.json                               # H200
    python -m benchmarks.prefill_bench --device cpu --presets tiny-qwen3 --tokens 32,64 --rows 1,4
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.attention import use_backend
from bubblelab.core.files import write_atomic
from bubblelab.core.timeline import Timeline
from bubblelab.engine.attention import select_backend
from bubblelab.engine.config import EngineConfig, default_dtype
from bubblelab.engine.llm_engine import LLMEngine
from bubblelab.engine.loader import load_model
from bubblelab.engine.sampling_params import SamplingParams

VARIANTS = {  # name -> (attention backend, enforce_eager)
    "graph": ("triton", False),
    "eager-triton": ("triton", True),
    "eager-torch": ("torch", True),
}


def measure(engine: LLMEngine, tokens: int, rows: int, rng: np.random.Generator, tag: str) -> dict:
    """One prefill of `rows` prompts through the engine; its host launch and GPU forward times."""
    timeline = engine.timeline = engine.phases.timeline = Timeline()
    vocab = engine.loaded.config.vocab_size
    params = SamplingParams(max_tokens=1, ignore_eos=True)
    for i in range(rows):
        prompt = rng.integers(0, vocab, tokens // rows).tolist()
        engine.add_request(f"{tag}-{i}", prompt, params)
    while engine.has_unfinished():
        engine.step()
    for i in range(rows):
        engine.seqs.pop(f"{tag}-{i}")
    prefill = [s.step for s in timeline.steps.values() if s.kind == "prefill"]
    assert len(prefill) == 1, f"expected one prefill, got {len(prefill)} (token budget too small?)"
    launch = next(r for r in timeline.host if r[0] == "launch" and r[1] == prefill[0])
    fwd = next(r for r in timeline.device if r[0] == "forward" and r[1] == prefill[0])
    gpu = fwd[3] - fwd[2]
    return {
        "host_ms": (launch[3] - launch[2]) / 1e6,
        "gpu_ms": gpu / 1e6,
        "busy_pct": 100 * gpu / max(fwd[3] - launch[2], 1),
    }


def bench(args) -> list[dict]:
    rows_out = []
    max_rows = max(args.rows)
    max_tokens = max(args.tokens)
    for preset in args.presets:
        loaded = load_model(
            preset, dtype=args.dtype, device=args.device, seed=0, attention_backend="torch"
        )
        for variant in args.variants:
            backend, eager = VARIANTS[variant]
            if args.device == "cpu" and backend == "triton":
                continue  # Triton kernels need CUDA (the CPU tests run them interpreted)
            use_backend(loaded.model, select_backend(backend, args.device))
            t0 = time.perf_counter()
            engine = LLMEngine(
                EngineConfig(
                    model=preset,
                    device=args.device,
                    dtype=args.dtype,
                    depth=1,
                    max_num_seqs=max_rows,
                    max_num_batched_tokens=max_tokens,
                    max_model_len=max_tokens + 8,
                    enforce_eager=eager,
                    num_kv_blocks=4 * max_tokens // 16 + 2 * max_rows,
                ),
                loaded,
            )
            print(
                f"{preset} {variant}: engine ready in {time.perf_counter() - t0:.1f} s", flush=True
            )
            rng = np.random.default_rng(0)
            for tokens in args.tokens:
                for rows in args.rows:
                    if rows > tokens:
                        continue
                    runs = [
                        measure(engine, tokens, rows, rng, f"{tokens}-{rows}-{i}")
                        for i in range(args.warmup + args.repeats)
                    ][args.warmup :]
                    row = {"preset": preset, "variant": variant, "tokens": tokens, "rows": rows}
                    for key in ("host_ms", "gpu_ms", "busy_pct"):
                        values = [r[key] for r in runs]
                        row[key] = statistics.median(values)
                        row[key + "_all"] = values
                    rows_out.append(row)
                    print(
                        f"  {tokens:>5} tokens x {rows:>3} rows: host {row['host_ms']:7.3f} ms, "
                        f"GPU {row['gpu_ms']:8.3f} ms, busy {row['busy_pct']:5.1f}%",
                        flush=True,
                    )
            engine.check_idle()
            engine.close()
            del engine
            gc.collect()
            if args.device == "cuda":
                torch.cuda.empty_cache()  # the next engine sizes its pool from free memory
        del loaded
        gc.collect()
        if args.device == "cuda":
            torch.cuda.empty_cache()
    return rows_out


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--presets", default="qwen3-4b")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tokens", default="32,128,512,2048,8192")
    ap.add_argument("--rows", default="1,8,32,128")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    args.presets = args.presets.split(",")
    args.tokens = [int(x) for x in args.tokens.split(",")]
    args.rows = [int(x) for x in args.rows.split(",")]
    args.variants = args.variants.split(",")
    args.dtype = default_dtype(args.device)
    meta = {
        "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
        "torch": torch.__version__,
        "command": "python -m benchmarks.prefill_bench "
        + " ".join(
            f"--{k} {','.join(map(str, v)) if isinstance(v, list) else v}"
            for k, v in vars(args).items()
            if k not in ("out", "dtype")
        ),
    }
    rows = bench(args)
    if args.out:
        write_atomic(args.out, json.dumps({"meta": meta, "rows": rows}, indent=1))
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
