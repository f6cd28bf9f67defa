"""bubblelab (depth 1 and 2) against Hugging Face `generate` on the same weights, in one process on
one GPU (against nano-vllm: benchmarks.compare_nanovllm).

Per preset (bf16, seeded random weights) and stream count, with repeats: decode tokens/s, step
period, forward time and GPU busy share in steady-state decode, end-to-end tokens/s and wall time;
plus the floor (weight bytes / device copy bandwidth) and forward time over it at batch 1. Engines:
  bubblelab-d1, bubblelab-d2  engine.driver.run_workload, closed loop of 2 x streams requests (L
                              uniform on [L/2, 3L/2]); per-step numbers from the engine's CUDA
                              events, steady state only; one pair per --bubblelab-backends entry:
                              the first is "bubblelab-dN", the others "bubblelab-dN[<backend>]" (the
                              `attention` column says which kernel ran)
  hf-static, hf-static-compiled
                              transformers' own Qwen3ForCausalLM holding our weights
                              (engine.export), greedy `generate` with a static cache on one static
                              batch of `streams` prompts, every row decoding exactly round(L)
                              tokens; "compiled" is generate's own torch.compile path
                              (reduce-overhead: CUDA graphs). Step periods from CUDA events at each
                              step's logits; (t(N) - t(1)) / (N - 1) kept as step_ms_wall.
Time: --budget-s is when optional work stops starting (extra backends, compiled HF),
--deadline-s when everything stops starting; outputs are rewritten after every phase, so a killed
run still leaves them. Writes compare_engines.json, compare_engines.md and compare_engines.png to
--out; see benchmarks/README.md.

    python -m benchmarks.compare_engines --out $OUT                          # H200: ~5-8 minutes
    python -m benchmarks.compare_engines --device cpu --presets tiny-qwen3 --streams 1,4 \\
        --repeats 1 --L 16 --out cmp
"""

from __future__ import annotations

import argparse
import json
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers

from benchmarks.compare_bubblelab import run_bubblelab
from benchmarks.compare_common import (
    METRICS,
    Clock,
    Sweep,
    first_line,
    free_memory,
    not_run,
)
from benchmarks.compare_hf import bench_hf
from benchmarks.compare_report import plot, write_markdown
from benchmarks.forward_kernels import copy_bandwidth
from bubblelab.core.files import write_atomic
from bubblelab.engine.export import hf_causal_lm
from bubblelab.engine.loader import LoadedModel, load_model


# -- the floor -------------------------------------------------------------------------------------
def floor(loaded: LoadedModel, bandwidth: float | None) -> dict:
    """A decode step reads every weight once: weight bytes / copy bandwidth is its lower bound."""
    nbytes = sum(p.numel() * p.element_size() for p in loaded.model.parameters())
    return {"weight_bytes": nbytes, "floor_ms": 1e3 * nbytes / bandwidth if bandwidth else None}


def floor_ratios(floors: dict, summary: list[dict]) -> None:
    """Achieved time at batch 1 over the floor: forward for bubblelab, the whole step for HF (no
    forward split)."""
    for row in summary:
        f = floors.get(row["preset"], {}).get("floor_ms")
        if row["streams"] != 1 or not f:
            continue
        key = "forward_ms" if row["forward_ms"] is not None else "step_ms"
        if row[key] is not None:
            floors[row["preset"]][f"{row['engine']}_{key.removesuffix('_ms')}_over_floor"] = (
                row[key] / f
            )


# -- summary ---------------------------------------------------------------------------------------
def summarise(rows: list[dict]) -> list[dict]:
    """Median and spread (min, max) over repeats per (preset, streams, engine)."""
    keys = sorted({(r["preset"], r["streams"], r["engine"]) for r in rows})
    out = []
    for preset, streams, engine in keys:
        group = [
            r for r in rows if (r["preset"], r["streams"], r["engine"]) == (preset, streams, engine)
        ]
        row = {
            "preset": preset,
            "streams": streams,
            "engine": engine,
            "repeats": len(group),
            "attention": next((r["attention"] for r in group if r.get("attention")), None),
        }
        for m in METRICS:
            values = [r[m] for r in group if r[m] is not None and np.isfinite(r[m])]
            row[m] = float(np.median(values)) if values else None
            row[f"{m}_min"], row[f"{m}_max"] = (
                (min(values), max(values)) if values else (None, None)
            )
        out.append(row)
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--presets", default="qwen3-0.6b,qwen3-4b")
    ap.add_argument("--streams", default="1,8,32,128")
    ap.add_argument(
        "--repeats", type=int, default=3, help="bubblelab repeats (HF runs min(2, this))"
    )
    ap.add_argument("--L", type=float, default=110.0, help="mean output length")
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument(
        "--requests-per-stream", type=int, default=2, help="bubblelab requests per run / streams"
    )
    ap.add_argument(
        "--out", type=Path, required=True, help="directory for the JSON, markdown and PNG"
    )
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument(
        "--bubblelab-backends",
        default=None,
        help="comma-separated attention backends for bubblelab rows, the first being the default "
        "(unsuffixed) one; default triton on CUDA, torch on CPU (e.g. triton,flash-attn,torch)",
    )
    ap.add_argument(
        "--block-size",
        type=int,
        default=16,
        help="bubblelab KV page size (rounded up to a backend's multiple: 256 for flash-attn 2)",
    )
    ap.add_argument(
        "--skip-hf-compile",
        action="store_true",
        help="no torch.compile'd HF variant (saves minutes)",
    )
    ap.add_argument(
        "--budget-s",
        type=float,
        default=390.0,
        help="start no optional work after this many seconds: extra bubblelab backends, "
        "compiled-HF batch sizes (each compiles ~1 min)",
    )
    ap.add_argument(
        "--deadline-s",
        type=float,
        default=480.0,
        help="start nothing new after this many seconds (bubblelab runs, HF batch sizes)",
    )
    a = ap.parse_args(argv)
    backends = tuple(
        dict.fromkeys(
            b.strip()
            for b in (a.bubblelab_backends or ("triton" if a.device == "cuda" else "torch")).split(
                ","
            )
            if b.strip()
        )
    )
    sweep = Sweep(
        presets=a.presets.split(","),
        streams=sorted(int(s) for s in a.streams.split(",")),
        repeats=a.repeats,
        requests_per_stream=a.requests_per_stream,
        hf_repeats=min(2, a.repeats),
        L=a.L,
        prompt_len=a.prompt_len,
        device=a.device,
        hf_compile=not a.skip_hf_compile,
        backends=backends,
        block_size=a.block_size,
        deadline_s=a.deadline_s,
    )
    a.out.mkdir(parents=True, exist_ok=True)
    clock = Clock()
    bandwidth = copy_bandwidth(sweep.device)
    result: dict[str, Any] = {
        "device": torch.cuda.get_device_name() if sweep.device == "cuda" else "cpu",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "sweep": {**asdict(sweep), "dtype": sweep.dtype},
        "copy_bandwidth_gbs": bandwidth / 1e9 if bandwidth else None,
        "not_run": [],
        "floor": {},
        "runs": [],
    }
    clock.log(
        f"{result['device']}, copy bandwidth {result['copy_bandwidth_gbs'] or 0:.0f} GB/s; "
        f"bubblelab backends {','.join(backends)}"
    )
    # Phase 1, the predictable part: each model loaded once, bubblelab (default backend) and eager
    # HF on it.
    hf_models, loaded_models = {}, {}
    for preset in sweep.presets:
        try:
            loaded = load_model(
                preset, dtype=sweep.dtype, device=sweep.device, seed=0, attention_backend="torch"
            )
        except Exception as exc:  # noqa: BLE001
            traceback.print_exc()
            result["not_run"].append(
                not_run("all", preset, f"load failed: {type(exc).__name__}: {first_line(exc)}")
            )
            continue
        loaded_models[preset] = loaded
        result["floor"][preset] = floor(loaded, bandwidth)
        clock.log(
            f"{preset}: loaded, {result['floor'][preset]['weight_bytes'] / 1e9:.2f} GB of weights"
        )
        run_bubblelab(loaded, preset, sweep, clock, backends[0], result)
        _save(result, a.out, clock)
        try:
            hf_models[preset] = (hf_causal_lm(loaded), loaded.config)
            rows, failures = bench_hf(
                *hf_models[preset], "hf-static", preset, sweep, clock, sweep.deadline_s
            )
        except Exception as exc:  # noqa: BLE001
            traceback.print_exc()
            rows, failures = (
                [],
                [not_run("hf-static", preset, f"{type(exc).__name__}: {first_line(exc)}")],
            )
        result["runs"] += rows
        result["not_run"] += failures
        free_memory(sweep.device)
        _save(result, a.out, clock)
    # Phase 1b, optional and within --budget-s: the extra backends, flash-attn's first.
    for stage in sorted(backends[1:], key=lambda b: b != "flash-attn"):
        for preset, loaded in loaded_models.items():
            if clock.elapsed() > a.budget_s:
                reason = f"not run: past the {a.budget_s:.0f} s time budget (--budget-s)"
                result["not_run"].append(not_run(f"bubblelab[{stage}]", preset, reason))
                continue
            run_bubblelab(loaded, preset, sweep, clock, stage, result)
            free_memory(sweep.device)
            _save(result, a.out, clock)
    del loaded_models
    free_memory(sweep.device)
    # Phase 2: generate's compile path, minutes of compiling, last and within the time budget.
    for preset, (model, cfg) in hf_models.items():
        if not sweep.hf_compile or sweep.device != "cuda":
            why = (
                "skipped (--skip-hf-compile)"
                if not sweep.hf_compile
                else "generate compiles only on CUDA"
            )
            result["not_run"].append(not_run("hf-static-compiled", preset, f"not run: {why}"))
            continue
        rows, failures = bench_hf(
            model,
            cfg,
            "hf-static-compiled",
            preset,
            sweep,
            clock,
            min(a.budget_s, sweep.deadline_s),
        )
        result["runs"] += rows
        result["not_run"] += failures
        _save(result, a.out, clock)
    del hf_models
    free_memory(sweep.device)

    markdown = _save(result, a.out, clock, plot_too=True)
    print(markdown, flush=True)
    clock.log(f"wrote {a.out}/compare_engines.{{json,md,png}}")
    return result


def _save(result: dict, out: Path, clock: Clock, plot_too: bool = False) -> str:
    """Summary, floor ratios, JSON and markdown (and the plot at the end); rewritten after every
    phase so a run killed at its time limit still leaves what it finished. Never raises: returns the
    markdown or ''."""
    try:
        result["summary"] = summarise(result["runs"])
        floor_ratios(result["floor"], result["summary"])
        result["wall_s"] = clock.elapsed()
        write_atomic(out / "compare_engines.json", json.dumps(result, indent=1, default=str))
        markdown = write_markdown(result, out / "compare_engines.md")
        if plot_too:
            plot(result, out / "compare_engines.png")
        return markdown
    except Exception as exc:  # noqa: BLE001
        traceback.print_exc()
        clock.log(f"writing the outputs failed: {type(exc).__name__}: {first_line(exc)}")
        return ""


if __name__ == "__main__":
    main()
