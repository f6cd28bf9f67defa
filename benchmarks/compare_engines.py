"""bubblelab (depth 1 and 2) against Hugging Face `generate` on the same weights, in one process on one GPU.

Per preset (bf16, seeded random weights) and stream count, with repeats: decode tokens/s, step period,
forward time and GPU busy share in steady-state decode, end-to-end tokens/s and wall time; plus the floor
(weight bytes / device copy bandwidth) and forward time over it at batch 1. Engines:
  bubblelab-d1, bubblelab-d2  engine.bench.run_workload, closed loop of 2 x streams requests (L uniform on
                              [L/2, 3L/2]); per-step numbers from the engine's CUDA events, steady state only
  hf-static, hf-static-compiled
                              transformers' own Qwen3ForCausalLM holding our weights (engine.export), greedy
                              `generate` with a static cache on one static batch of `streams` prompts, every
                              row decoding exactly round(L) tokens; "compiled" is generate's own torch.compile
                              path (reduce-overhead: CUDA graphs). Step periods from CUDA events at each
                              step's logits; (t(N) - t(1)) / (N - 1) kept as step_ms_wall.
  nano-vllm                   detected only: reported as "not run: <reason>" when it or flash-attn is missing
Writes compare_engines.json, compare_engines.md and compare_engines.png to --out; see benchmarks/README.md.

    python benchmarks/compare_engines.py --out $OUT                          # H200: ~5-8 minutes
    python benchmarks/compare_engines.py --device cpu --presets tiny-qwen3 --streams 1,4 --repeats 1 --L 16 --out cmp
"""
from __future__ import annotations

import argparse
import gc
import importlib
import itertools
import json
import sys
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))   # run as a script: benchmarks/ siblings by package name

import transformers  # noqa: E402
from transformers import GenerationConfig, LogitsProcessor, LogitsProcessorList, PreTrainedModel  # noqa: E402

from benchmarks.compare_report import plot, write_markdown  # noqa: E402
from benchmarks.forward_kernels import copy_bandwidth  # noqa: E402
from engine.bench import run_workload  # noqa: E402
from engine.config import EngineConfig, ModelConfig  # noqa: E402
from engine.export import hf_causal_lm  # noqa: E402
from engine.llm_engine import LLMEngine  # noqa: E402
from engine.loader import LoadedModel, load_model  # noqa: E402
from engine.workload import WorkloadSpec, make_requests  # noqa: E402
from profiling.analysis import WARMUP_STEPS, per_step_from_timeline, steady_state  # noqa: E402
from profiling.timeline import Timeline  # noqa: E402

METRICS = ("decode_tokens_per_s", "step_ms", "forward_ms", "gpu_busy", "prefill_ms", "e2e_tokens_per_s", "wall_s")


@dataclass
class Sweep:
    presets: list[str]
    streams: list[int]
    repeats: int              # bubblelab runs per (depth, streams)
    requests_per_stream: int  # bubblelab requests per run = this x streams (2: ~2L steps at full batch)
    hf_repeats: int           # generate pairs (t(1), t(N)) per (variant, streams): HF is slow, its spread small
    L: float                  # mean output length
    prompt_len: int
    device: str
    hf_compile: bool

    @property
    def dtype(self) -> str:
        return "bf16" if self.device == "cuda" else "fp32"


class Clock:
    """Progress lines with the seconds since the start, flushed (the lead watches them on the device)."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def log(self, msg: str) -> None:
        print(f"[{self.elapsed():6.1f}s] {msg}", flush=True)


# -- bubblelab -------------------------------------------------------------------------------------------
def bench_bubblelab(loaded: LoadedModel, preset: str, sweep: Sweep, clock: Clock) -> list[dict]:
    """Depth 1 and 2 back to back per repeat and stream count, one engine per depth for the whole sweep."""
    max_model_len = sweep.prompt_len + int(np.ceil(1.5 * sweep.L)) + 1   # the longest request: no wasted width
    engines = {depth: LLMEngine(EngineConfig(model=preset, device=sweep.device, dtype=sweep.dtype, depth=depth,
                                             max_num_seqs=max(sweep.streams), max_model_len=max_model_len),
                                loaded, timeline=Timeline())
               for depth in (1, 2)}
    clock.log(f"{preset}: bubblelab engines ready (graphs captured: {bool(engines[2].runner.graphs[0])})")
    rows = []
    try:
        for repeat in range(sweep.repeats):
            for streams in sweep.streams:
                spec = WorkloadSpec(streams=streams, requests=sweep.requests_per_stream * streams,
                                    output_len_mean=sweep.L, prompt_len=sweep.prompt_len, seed=repeat)
                for depth, engine in engines.items():
                    row = {"engine": f"bubblelab-d{depth}", "preset": preset, "streams": streams, "repeat": repeat,
                           **bubblelab_metrics(run_workload(engine, spec), depth)}
                    rows.append(row)
                    clock.log(_progress(row))
    finally:
        for engine in engines.values():
            engine.close()
    return rows


def bubblelab_metrics(result, depth: int) -> dict:
    """Steady-state decode from the engine's own device timing; end-to-end numbers from the whole run."""
    steady = steady_state(per_step_from_timeline(result.timeline, "run", depth))
    period = steady.period_ms.sum()
    s = result.summary
    return {
        "decode_tokens_per_s": 1e3 * steady.batch_size.sum() / period if period else float("nan"),
        "step_ms": float(steady.period_ms.median()), "forward_ms": float(steady.forward_ms.median()),
        "gpu_busy": float((steady.forward_ms + steady.sampling_ms).sum() / period) if period else float("nan"),
        "prefill_ms": None, "e2e_tokens_per_s": s["tokens_per_s"], "wall_s": s["wall_s"],
        "generated_tokens": s["generated_tokens"], "mean_output_len": s["mean_generated_len"],
        "steady_steps": len(steady), "steady_batch": int(steady.batch_size.median()) if len(steady) else None,
    }


# -- Hugging Face transformers -----------------------------------------------------------------------------
def bench_hf(model: PreTrainedModel, cfg: ModelConfig, name: str, preset: str, sweep: Sweep, clock: Clock,
             deadline_s: float = float("inf")) -> tuple[list[dict], list[dict]]:
    """Rows and failures of one variant (a failure is data: the error is recorded and the sweep goes on).
    A batch size is started only before `deadline_s` since the start (compiling one takes a minute)."""
    compiled = name == "hf-static-compiled"
    rows: list[dict] = []
    for streams in sweep.streams:
        if clock.elapsed() > deadline_s:
            return rows, [_not_run(name, preset, f"not run from {streams} streams on: past the {deadline_s:.0f} s "
                                                 "time budget (--budget-s)")]
        try:
            rows += hf_runs(model, cfg, name, compiled, preset, streams, sweep, clock)
        except Exception as exc:   # a compile failure is a result, not a crash
            traceback.print_exc()
            first_line = str(exc).splitlines()[0] if str(exc) else ""
            torch._dynamo.reset()
            return rows, [_not_run(name, preset, f"failed at {streams} streams: {type(exc).__name__}: {first_line}")]
    return rows, []


def hf_runs(model: PreTrainedModel, cfg: ModelConfig, name: str, compiled: bool, preset: str, streams: int,
            sweep: Sweep, clock: Clock) -> list[dict]:
    new_tokens = round(sweep.L)
    spec = WorkloadSpec(streams=streams, requests=streams, prompt_len=sweep.prompt_len)
    prompts = torch.tensor([r.prompt_ids for r in make_requests(spec, cfg.vocab_size)], device=sweep.device)
    # Compiled: the full length, as the static cache's length is part of the compiled graph; eager: just warm.
    warm = hf_generate(model, cfg, prompts, new_tokens if compiled else min(new_tokens, 8), compiled)
    clock.log(f"{preset} {name} streams={streams}: warm-up generate {warm.seconds:.1f} s")
    rows = []
    for repeat in range(sweep.hf_repeats):
        prefill_only = hf_generate(model, cfg, prompts, 1, compiled)
        run = hf_generate(model, cfg, prompts, new_tokens, compiled)
        decode = run.marks_ms[1:]                         # after the prefill: one period per decode step
        steady = decode[WARMUP_STEPS:] or decode          # as bubblelab's steady state, the first steps skipped
        generated = (run.ids.shape[1] - prompts.shape[1]) * streams
        row = {"engine": name, "preset": preset, "streams": streams, "repeat": repeat,
               "decode_tokens_per_s": 1e3 * streams * len(steady) / sum(steady),
               "step_ms": float(np.median(steady)), "forward_ms": None, "gpu_busy": None,
               "prefill_ms": run.marks_ms[0], "e2e_tokens_per_s": generated / run.seconds, "wall_s": run.seconds,
               # the brief's estimate: per-call set-up (cache allocation, graph re-recording) lands in the steps
               "step_ms_wall": 1e3 * (run.seconds - prefill_only.seconds) / (new_tokens - 1),
               "generated_tokens": generated, "mean_output_len": generated / streams, "warmup_s": warm.seconds}
        rows.append(row)
        clock.log(_progress(row))
    return rows


@dataclass
class Generated:
    ids: torch.Tensor
    seconds: float            # host wall time of the generate call
    marks_ms: list[float]     # device time from the call's start to the first logits, then between logits


class StepMarks(LogitsProcessor):
    """Marks each step's logits on the device stream (CUDA events; the host clock on CPU, where every op runs
    before the host moves on), so per-step periods exclude generate's per-call set-up."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.marks: list = []
        self.mark()

    def mark(self) -> None:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.marks.append(event)
        else:
            self.marks.append(time.perf_counter())

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        self.mark()
        return scores

    def intervals_ms(self) -> list[float]:
        if self.cuda:
            return [a.elapsed_time(b) for a, b in itertools.pairwise(self.marks)]
        return [1e3 * (b - a) for a, b in itertools.pairwise(self.marks)]


def hf_generate(model: PreTrainedModel, cfg: ModelConfig, prompts: torch.Tensor, new_tokens: int,
                compiled: bool) -> Generated:
    """Greedy, static cache, exactly `new_tokens` per row (EOS masked until then)."""
    eos = list(cfg.eos_token_ids)
    config = GenerationConfig(do_sample=False, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                              cache_implementation="static", disable_compile=not compiled,
                              eos_token_id=eos or None, pad_token_id=eos[0] if eos else 0)
    _sync(prompts.device)
    t0 = time.perf_counter()
    marks = StepMarks(prompts.device)
    ids = model.generate(prompts, attention_mask=torch.ones_like(prompts), generation_config=config,
                         logits_processor=LogitsProcessorList([marks]))   # no_grad inside
    _sync(prompts.device)
    return Generated(ids, time.perf_counter() - t0, marks.intervals_ms())


# -- nano-vllm, the floor ----------------------------------------------------------------------------------
def nano_vllm_status() -> str:
    """Why nano-vllm was not run (it needs flash-attn, which the GPU image lacks)."""
    missing = []
    for module, package in (("nanovllm", "nano-vllm-fork"), ("flash_attn", "flash-attn")):
        try:
            importlib.import_module(module)
        except Exception as exc:   # ImportError, or a flash-attn build that fails to load its CUDA library
            missing.append(f"{package} ({type(exc).__name__}: {exc})")
    if missing:
        return "not run: cannot import " + "; ".join(missing)
    return "not run: importable, but it loads a checkpoint directory with a tokenizer, which random presets lack"


def floor(loaded: LoadedModel, bandwidth: float | None) -> dict:
    """A decode step reads every weight once: weight bytes / copy bandwidth is its lower bound."""
    nbytes = sum(p.numel() * p.element_size() for p in loaded.model.parameters())
    return {"weight_bytes": nbytes, "floor_ms": 1e3 * nbytes / bandwidth if bandwidth else None}


def floor_ratios(floors: dict, summary: list[dict]) -> None:
    """Achieved time at batch 1 over the floor: forward for bubblelab, the whole step for HF (no forward split)."""
    for row in summary:
        f = floors.get(row["preset"], {}).get("floor_ms")
        if row["streams"] != 1 or not f:
            continue
        key = "forward_ms" if row["forward_ms"] is not None else "step_ms"
        floors[row["preset"]][f"{row['engine']}_{key.removesuffix('_ms')}_over_floor"] = row[key] / f


# -- summary -------------------------------------------------------------------------------------------
def summarise(rows: list[dict]) -> list[dict]:
    """Median and spread (min, max) over repeats per (preset, streams, engine)."""
    keys = sorted({(r["preset"], r["streams"], r["engine"]) for r in rows})
    out = []
    for preset, streams, engine in keys:
        group = [r for r in rows if (r["preset"], r["streams"], r["engine"]) == (preset, streams, engine)]
        row = {"preset": preset, "streams": streams, "engine": engine, "repeats": len(group)}
        for m in METRICS:
            values = [r[m] for r in group if r[m] is not None and np.isfinite(r[m])]
            row[m] = float(np.median(values)) if values else None
            row[f"{m}_min"], row[f"{m}_max"] = (min(values), max(values)) if values else (None, None)
        out.append(row)
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--presets", default="qwen3-0.6b,qwen3-4b")
    ap.add_argument("--streams", default="1,8,32,128")
    ap.add_argument("--repeats", type=int, default=3, help="bubblelab repeats (HF runs min(2, this))")
    ap.add_argument("--L", type=float, default=110.0, help="mean output length")
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--requests-per-stream", type=int, default=2, help="bubblelab requests per run / streams")
    ap.add_argument("--out", type=Path, required=True, help="directory for the JSON, markdown and PNG")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--skip-hf-compile", action="store_true", help="no torch.compile'd HF variant (saves minutes)")
    ap.add_argument("--budget-s", type=float, default=390.0,
                    help="start no compiled-HF batch size after this many seconds (each compiles ~1 min)")
    a = ap.parse_args(argv)
    sweep = Sweep(presets=a.presets.split(","), streams=sorted(int(s) for s in a.streams.split(",")),
                  repeats=a.repeats, requests_per_stream=a.requests_per_stream, hf_repeats=min(2, a.repeats),
                  L=a.L, prompt_len=a.prompt_len,
                  device=a.device, hf_compile=not a.skip_hf_compile)
    a.out.mkdir(parents=True, exist_ok=True)
    clock = Clock()
    bandwidth = copy_bandwidth(sweep.device)
    result = {"device": torch.cuda.get_device_name() if sweep.device == "cuda" else "cpu",
              "torch": torch.__version__, "transformers": transformers.__version__,
              "sweep": {**asdict(sweep), "dtype": sweep.dtype},
              "copy_bandwidth_gbs": bandwidth / 1e9 if bandwidth else None,
              "not_run": [_not_run("nano-vllm", None, nano_vllm_status())], "floor": {}, "runs": []}
    clock.log(f"{result['device']}, copy bandwidth {result['copy_bandwidth_gbs'] or 0:.0f} GB/s; "
              f"nano-vllm {result['not_run'][0]['reason']}")
    # Phase 1, the predictable part: each model loaded once, bubblelab and eager HF on it, HF copy kept.
    hf_models = {}
    for preset in sweep.presets:
        loaded = load_model(preset, dtype=sweep.dtype, device=sweep.device, seed=0)
        result["floor"][preset] = floor(loaded, bandwidth)
        clock.log(f"{preset}: loaded, {result['floor'][preset]['weight_bytes'] / 1e9:.2f} GB of weights")
        result["runs"] += bench_bubblelab(loaded, preset, sweep, clock)
        hf_models[preset] = (hf_causal_lm(loaded), loaded.config)
        rows, failures = bench_hf(*hf_models[preset], "hf-static", preset, sweep, clock)
        result["runs"] += rows
        result["not_run"] += failures
        del loaded   # our copy of the weights; the HF copy stays for phase 2
        _free(sweep.device)
    # Phase 2: generate's compile path, minutes of compiling, last and within the time budget.
    for preset, (model, cfg) in hf_models.items():
        if not sweep.hf_compile or sweep.device != "cuda":
            why = "skipped (--skip-hf-compile)" if not sweep.hf_compile else "generate compiles only on CUDA"
            result["not_run"].append(_not_run("hf-static-compiled", preset, f"not run: {why}"))
            continue
        rows, failures = bench_hf(model, cfg, "hf-static-compiled", preset, sweep, clock, a.budget_s)
        result["runs"] += rows
        result["not_run"] += failures
    del hf_models
    _free(sweep.device)

    result["summary"] = summarise(result["runs"])
    floor_ratios(result["floor"], result["summary"])
    result["wall_s"] = clock.elapsed()
    (a.out / "compare_engines.json").write_text(json.dumps(result, indent=1))
    markdown = write_markdown(result, a.out / "compare_engines.md")
    plot(result, a.out / "compare_engines.png")
    print(markdown, flush=True)
    clock.log(f"wrote {a.out}/compare_engines.{{json,md,png}}")
    return result


def _not_run(engine: str, preset: str | None, reason: str) -> dict:
    return {"engine": engine, "preset": preset, "reason": reason}


def _progress(row: dict) -> str:
    busy = f", busy {100 * row['gpu_busy']:.0f}%" if row.get("gpu_busy") is not None else ""
    return (f"{row['preset']} {row['engine']} streams={row['streams']} repeat={row['repeat']}: "
            f"{row['decode_tokens_per_s']:.0f} decode tok/s, step {row['step_ms']:.3f} ms{busy}, "
            f"{row['e2e_tokens_per_s']:.0f} e2e tok/s")


def _free(device: str) -> None:
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


if __name__ == "__main__":
    main()
