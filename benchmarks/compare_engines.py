"""bubblelab (depth 1 and 2) against Hugging Face `generate` on the same weights, in one process on one GPU.

Per preset (bf16, seeded random weights) and stream count, with repeats: decode tokens/s, step period,
forward time and GPU busy share in steady-state decode, end-to-end tokens/s and wall time; plus the floor
(weight bytes / device copy bandwidth) and forward time over it at batch 1. Engines:
  bubblelab-d1, bubblelab-d2  engine.bench.run_workload, closed loop of 2 x streams requests (L uniform on
                              [L/2, 3L/2]); per-step numbers from the engine's CUDA events, steady state only;
                              one pair per --bubblelab-backends entry: the first is "bubblelab-dN", the others
                              "bubblelab-dN[<backend>]" (the `attention` column says which kernel ran)
  hf-static, hf-static-compiled
                              transformers' own Qwen3ForCausalLM holding our weights (engine.export), greedy
                              `generate` with a static cache on one static batch of `streams` prompts, every
                              row decoding exactly round(L) tokens; "compiled" is generate's own torch.compile
                              path (reduce-overhead: CUDA graphs). Step periods from CUDA events at each
                              step's logits; (t(N) - t(1)) / (N - 1) kept as step_ms_wall.
  nano-vllm                   when `nanovllm` and flash-attn-4 import (through benchmarks/flash_attn_shim):
                              LLM.generate on `streams` random prompts, round(L) tokens each, in a child process
                              with a timeout (a hang or crash cannot take the run down); decode tokens/s =
                              decode tokens / (wall - wall of a max_tokens=1 run); else "not run: <reason>"
Time: --budget-s is when optional work stops starting (extra backends, nano-vllm, compiled HF), --deadline-s when
everything stops starting; outputs are rewritten after every phase, so a killed run still leaves them.
Writes compare_engines.json, compare_engines.md and compare_engines.png to --out; see benchmarks/README.md.

    python benchmarks/compare_engines.py --out $OUT                          # H200: ~5-8 minutes
    python benchmarks/compare_engines.py --device cpu --presets tiny-qwen3 --streams 1,4 --repeats 1 --L 16 --out cmp
"""
from __future__ import annotations

import argparse
import atexit
import contextlib
import gc
import importlib
import importlib.util
import itertools
import json
import os
import signal
import subprocess
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
from engine.attention import select_backend  # noqa: E402
from engine.attention.flash_backend import is_shim  # noqa: E402
from engine.bench import run_workload  # noqa: E402
from engine.config import EngineConfig, ModelConfig  # noqa: E402
from engine.export import hf_causal_lm, to_hf  # noqa: E402
from engine.llm_engine import LLMEngine  # noqa: E402
from engine.loader import LoadedModel, load_model  # noqa: E402
from engine.workload import WorkloadSpec, make_requests  # noqa: E402
from profiling.analysis import WARMUP_STEPS, per_step_from_timeline, steady_state  # noqa: E402
from profiling.timeline import Timeline  # noqa: E402

SHIM = ROOT / "benchmarks" / "flash_attn_shim"   # `flash_attn` with the FA2 API over flash-attn-4, for nano-vllm
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
    backends: tuple[str, ...] = ("triton",)   # bubblelab attention backends; the first is the default
    block_size: int = 16                       # bubblelab KV page size (raised to a backend's block_size_multiple)
    deadline_s: float = float("inf")           # no new unit of work starts after this many seconds

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
def engine_label(depth: int, backend: str, sweep: Sweep) -> str:
    """bubblelab-dN for the default (first) backend, bubblelab-dN[<backend>] for the others."""
    return f"bubblelab-d{depth}" if backend == sweep.backends[0] else f"bubblelab-d{depth}[{backend}]"


def use_backend(loaded: LoadedModel, name: str, device: str):
    """Point the loaded model's attention (model and every layer) at a fresh `name` backend; returns it. One
    copy of the weights serves every backend; engines built afterwards capture their graphs with it."""
    backend = select_backend(name, device)
    loaded.model.attn_backend = backend
    for layer in loaded.model.layers:
        layer.self_attn.backend = backend
    return backend


def bench_bubblelab(loaded: LoadedModel, preset: str, sweep: Sweep, clock: Clock, backend: str,
                    rows: list[dict]) -> None:
    """Depth 1 and 2 back to back per repeat and stream count, one engine per depth for the whole sweep, with
    attention backend `backend`. Rows are appended to `rows` as they come, so a failure keeps the finished ones.
    Raises on failure (the caller records it); stops early (returns) past sweep.deadline_s."""
    impl = use_backend(loaded, backend, sweep.device)
    attention = backend + (f"({impl.impl})" if getattr(impl, "impl", None) else "")
    block_size = sweep.block_size
    if block_size % impl.block_size_multiple:
        block_size = impl.block_size_multiple * -(-block_size // impl.block_size_multiple)
    max_model_len = sweep.prompt_len + int(np.ceil(1.5 * sweep.L)) + 1   # the longest request: no wasted width
    engines: dict[int, LLMEngine] = {}
    try:
        for depth in (1, 2):
            engines[depth] = LLMEngine(EngineConfig(model=preset, device=sweep.device, dtype=sweep.dtype, depth=depth,
                                                    max_num_seqs=max(sweep.streams), max_model_len=max_model_len,
                                                    block_size=block_size, attention_backend=backend),
                                       loaded, timeline=Timeline())
        clock.log(f"{preset}: bubblelab engines ready, attention {attention}, block size {block_size} "
                  f"(graphs captured: {bool(engines[2].runner.graphs[0])})")
        for repeat in range(sweep.repeats):
            for streams in sweep.streams:
                if clock.elapsed() > sweep.deadline_s:
                    raise TimeoutError(f"stopped before repeat {repeat} streams={streams}: past the "
                                       f"{sweep.deadline_s:.0f} s deadline (--deadline-s)")
                spec = WorkloadSpec(streams=streams, requests=sweep.requests_per_stream * streams,
                                    output_len_mean=sweep.L, prompt_len=sweep.prompt_len, seed=repeat)
                for depth, engine in engines.items():
                    row = {"engine": engine_label(depth, backend, sweep), "attention": attention, "preset": preset,
                           "streams": streams, "repeat": repeat,
                           **bubblelab_metrics(run_workload(engine, spec), depth)}
                    rows.append(row)
                    clock.log(_progress(row))
    finally:
        for engine in engines.values():
            try:
                engine.close()
            except Exception as exc:   # noqa: BLE001 - a failed close must not hide the real error
                clock.log(f"{preset} {backend}: engine close failed: {type(exc).__name__}: {_first_line(exc)}")
        engines.clear()
        _free(sweep.device)


def run_bubblelab(loaded: LoadedModel, preset: str, sweep: Sweep, clock: Clock, backend: str,
                  result: dict) -> None:
    """bench_bubblelab with any failure (build, compile, capture, run, deadline) recorded in not_run."""
    rows: list[dict] = []
    try:
        bench_bubblelab(loaded, preset, sweep, clock, backend, rows)
    except Exception as exc:   # noqa: BLE001 - a backend that cannot run is a result, not a crash
        if not isinstance(exc, TimeoutError):
            traceback.print_exc()
        reason = f"{type(exc).__name__}: {_first_line(exc)}"
        if rows:
            reason = f"partial ({len(rows)} rows): {reason}"
        result["not_run"].append(_not_run(f"bubblelab[{backend}]", preset, reason))
        clock.log(f"{preset} bubblelab[{backend}] not run: {reason}")
        _free(sweep.device)
    result["runs"] += rows


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
def nano_vllm_status() -> str | None:
    """None when nano-vllm can run here (nanovllm imports, and `flash_attn` is the shim over a working
    flash-attn-4 or a real FA2), else "not run: <why>". Puts benchmarks/flash_attn_shim first on sys.path when
    nanovllm is installed; no tokenizer files are needed (the harness passes a tokenizer object)."""
    try:
        if importlib.util.find_spec("nanovllm") is None:
            return "not run: cannot import nanovllm (nano-vllm-fork is not installed)"
        if str(SHIM) not in sys.path:
            sys.path.insert(0, str(SHIM))
        fa = sys.modules.get("flash_attn")
        if fa is not None and not is_shim(fa) and not hasattr(fa, "flash_attn_with_kvcache"):
            del sys.modules["flash_attn"]   # FA4's namespace portion imported earlier: let the shim take the name
        fa = importlib.import_module("flash_attn")
        if is_shim(fa) and fa.backend() != "fa4":
            return ("not run: flash_attn is the FA2-API shim but flash-attn-4 (`flash_attn.cute`) does not import "
                    "(the shim's SDPA fallback cannot be CUDA-graph captured)")
        if not hasattr(fa, "flash_attn_with_kvcache"):
            return f"not run: `flash_attn` ({getattr(fa, '__file__', None) or fa}) has no FA2 API"
        importlib.import_module("nanovllm")
    except Exception as exc:   # noqa: BLE001 - ImportError, or a flash-attn build that fails to load its CUDA library
        return f"not run: cannot import nano-vllm or flash-attn ({type(exc).__name__}: {_first_line(exc)})"
    return None


def write_hf_checkpoint(loaded: LoadedModel, directory: Path) -> Path:
    """config.json + model.safetensors of our seeded random weights (engine.export.to_hf), for nano-vllm."""
    from safetensors.torch import save_file
    raw, state = to_hf(loaded)
    directory.mkdir(parents=True, exist_ok=True)
    # a copy gives every split view its own storage (safetensors refuses shared ones)
    save_file({n: t.detach().to("cpu", copy=True).contiguous() for n, t in state.items()},
              str(directory / "model.safetensors"))
    (directory / "config.json").write_text(json.dumps(raw))
    return directory


def bench_nano_vllm(loaded: LoadedModel, preset: str, sweep: Sweep, clock: Clock, result: dict,
                    work_dir: Path) -> None:
    """nano-vllm on this preset in a child process (its own torch.distributed group, default device and dtype,
    dynamo settings; a hang is killed at the deadline). Rows land in result["runs"], failures in not_run."""
    rows_file = work_dir / f"nanovllm-{preset}.jsonl"
    rows_file.unlink(missing_ok=True)
    try:
        if clock.elapsed() > sweep.deadline_s:
            raise TimeoutError(f"past the {sweep.deadline_s:.0f} s deadline (--deadline-s)")
        t = time.perf_counter()
        ckpt = write_hf_checkpoint(loaded, work_dir / f"ckpt-{preset}")
        clock.log(f"{preset} nano-vllm: checkpoint written in {time.perf_counter() - t:.1f} s")
        job = {"ckpt": str(ckpt), "preset": preset, "streams": sweep.streams, "L": sweep.L,
               "prompt_len": sweep.prompt_len, "vocab_size": loaded.config.vocab_size, "rows_file": str(rows_file),
               "stop_at": time.time() + min(1e7, max(0.0, sweep.deadline_s - clock.elapsed()))}
        # the child stops starting stream counts at the deadline; the kill comes 30 s later (a hang, a slow init)
        timeout = min(86400.0, max(1.0, sweep.deadline_s - clock.elapsed() + 30.0))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SHIM), str(ROOT), os.environ.get("PYTHONPATH", "")])}
        # Output to a file, not pipes (compile workers it forks could hold a pipe open), and its own process
        # group, so a timeout kills the child and whatever it started.
        log = work_dir / f"nanovllm-{preset}.log"
        with log.open("w") as log_f:
            proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--nano-worker", json.dumps(job)],
                                    env=env, stdout=log_f, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                rc = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                rc = "timeout"
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)   # the child's group: its leftovers (or it, on timeout)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        tail = log.read_text(errors="replace")[-4000:]
        for line in tail.splitlines():
            if line.startswith("[nano-vllm]"):
                clock.log(f"{preset} {line}")
        rows = [json.loads(line) for line in rows_file.read_text().splitlines()] if rows_file.exists() else []
        result["runs"] += [r for r in rows if "engine" in r]
        errors = [r["error"] for r in rows if "error" in r]
        if rc != 0 or errors:
            reason = errors[0] if errors else (f"child process killed after {timeout:.0f} s" if rc == "timeout" else
                                               f"child exited with {rc}: {_last_error_line(tail)}")
            if rc != 0 and not errors:
                print(tail, flush=True)
            raise RuntimeError(reason)
    except Exception as exc:   # noqa: BLE001
        reason = f"{type(exc).__name__}: {_first_line(exc)}" if not isinstance(exc, RuntimeError) else _first_line(exc)
        result["not_run"].append(_not_run("nano-vllm", preset, reason))
        clock.log(f"{preset} nano-vllm not run: {reason}")
    finally:
        import shutil
        shutil.rmtree(work_dir / f"ckpt-{preset}", ignore_errors=True)


def nano_worker(job: dict) -> None:
    """Child process: nano-vllm LLM.generate per stream count; one JSON line per row (or error) to rows_file."""
    from types import SimpleNamespace
    rows_file = Path(job["rows_file"])

    def emit(obj: dict) -> None:
        with rows_file.open("a") as f:
            f.write(json.dumps(obj) + "\n")
    try:
        import nanovllm.models.qwen3 as nq
        from nanovllm import LLM, SamplingParams
        orig_get_rope = nq.get_rope

        def get_rope(*args, rope_scaling=None, **kw):   # transformers 5 reports rope_parameters here
            if isinstance(rope_scaling, dict) and rope_scaling.get("rope_type", "default") == "default":
                rope_scaling = None
            return orig_get_rope(*args, rope_scaling=rope_scaling, **kw)
        nq.get_rope = get_rope
        streams_list, L, prompt_len = job["streams"], round(job["L"]), job["prompt_len"]
        max_seqs = max(streams_list)
        max_model_len = prompt_len + L + 16
        t = time.perf_counter()
        llm = LLM(job["ckpt"], tokenizer=SimpleNamespace(eos_token_id=-1, decode=lambda ids: ""),
                  enforce_eager=False, max_model_len=max_model_len,
                  max_num_batched_tokens=max(4096, max_seqs * prompt_len, max_model_len), max_num_seqs=max_seqs,
                  gpu_memory_utilization=0.3)
        atexit.unregister(llm.exit)
        print(f"[nano-vllm] init (load, compile, graphs) {time.perf_counter() - t:.1f} s", flush=True)
        # Sampled (nano-vllm refuses temperature 0); ignore_eos fixes the length, so the cost is greedy's.
        params, first = (SamplingParams(temperature=1.0, max_tokens=n, ignore_eos=True) for n in (L, 1))
        for streams in streams_list:
            if time.time() > job["stop_at"]:
                emit({"error": f"stopped before {streams} streams: past the deadline (--deadline-s)"})
                break
            gen = torch.Generator().manual_seed(streams)
            prompts = torch.randint(0, job["vocab_size"], (streams, prompt_len), generator=gen).tolist()
            llm.generate(prompts, params, use_tqdm=False)   # warm-up
            row = {"engine": "nano-vllm", "attention": "flash-attn-4 (shim)", "preset": job["preset"],
                   "streams": streams, "repeat": 0}
            timings = []
            for p in (first, params):
                _sync(torch.device("cuda" if torch.cuda.is_available() else "cpu"))
                t = time.perf_counter()
                outs = llm.generate(prompts, p, use_tqdm=False)
                _sync(torch.device("cuda" if torch.cuda.is_available() else "cpu"))
                timings.append(time.perf_counter() - t)
            prefill_s, wall = timings
            generated = sum(len(o["token_ids"]) for o in outs)
            decode_s = wall - prefill_s
            decode_tokens = generated - streams   # the first token of each row comes from the prefill
            ok = decode_s > 0 and decode_tokens > 0
            row.update({"decode_tokens_per_s": decode_tokens / decode_s if ok else None,
                        "step_ms": 1e3 * decode_s / (L - 1) if ok and L > 1 else None,
                        "forward_ms": None, "gpu_busy": None, "prefill_ms": 1e3 * prefill_s,
                        "e2e_tokens_per_s": generated / wall, "wall_s": wall, "generated_tokens": generated,
                        "mean_output_len": generated / streams})
            emit(row)
            print(f"[nano-vllm] {_progress(row)}", flush=True)
        llm.exit()
    except Exception as exc:   # noqa: BLE001
        traceback.print_exc()
        emit({"error": f"{type(exc).__name__}: {_first_line(exc)}"})


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
        if row[key] is not None:
            floors[row["preset"]][f"{row['engine']}_{key.removesuffix('_ms')}_over_floor"] = row[key] / f


# -- summary -------------------------------------------------------------------------------------------
def summarise(rows: list[dict]) -> list[dict]:
    """Median and spread (min, max) over repeats per (preset, streams, engine)."""
    keys = sorted({(r["preset"], r["streams"], r["engine"]) for r in rows})
    out = []
    for preset, streams, engine in keys:
        group = [r for r in rows if (r["preset"], r["streams"], r["engine"]) == (preset, streams, engine)]
        row = {"preset": preset, "streams": streams, "engine": engine, "repeats": len(group),
               "attention": next((r["attention"] for r in group if r.get("attention")), None)}
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
    ap.add_argument("--bubblelab-backends", default=None,
                    help="comma-separated attention backends for bubblelab rows, the first being the default "
                         "(unsuffixed) one; default triton on CUDA, torch on CPU (e.g. triton,flash-attn,torch)")
    ap.add_argument("--block-size", type=int, default=16,
                    help="bubblelab KV page size (rounded up to a backend's multiple: 256 for flash-attn 2)")
    ap.add_argument("--skip-nanovllm", action="store_true", help="do not run nano-vllm even when it imports")
    ap.add_argument("--skip-hf-compile", action="store_true", help="no torch.compile'd HF variant (saves minutes)")
    ap.add_argument("--budget-s", type=float, default=390.0,
                    help="start no optional work after this many seconds: extra bubblelab backends, nano-vllm, "
                         "compiled-HF batch sizes (each compiles ~1 min)")
    ap.add_argument("--deadline-s", type=float, default=480.0,
                    help="start nothing new after this many seconds (bubblelab runs, nano-vllm stream counts)")
    a = ap.parse_args(argv)
    backends = tuple(dict.fromkeys(b.strip() for b in (a.bubblelab_backends or
                                                      ("triton" if a.device == "cuda" else "torch")).split(",")
                                   if b.strip()))
    sweep = Sweep(presets=a.presets.split(","), streams=sorted(int(s) for s in a.streams.split(",")),
                  repeats=a.repeats, requests_per_stream=a.requests_per_stream, hf_repeats=min(2, a.repeats),
                  L=a.L, prompt_len=a.prompt_len, device=a.device, hf_compile=not a.skip_hf_compile,
                  backends=backends, block_size=a.block_size, deadline_s=a.deadline_s)
    a.out.mkdir(parents=True, exist_ok=True)
    clock = Clock()
    bandwidth = copy_bandwidth(sweep.device)
    nano_status = "not run: skipped (--skip-nanovllm)" if a.skip_nanovllm else nano_vllm_status()
    if nano_status is None and sweep.device != "cuda":
        nano_status = "not run: nano-vllm needs CUDA"
    result = {"device": torch.cuda.get_device_name() if sweep.device == "cuda" else "cpu",
              "torch": torch.__version__, "transformers": transformers.__version__,
              "sweep": {**asdict(sweep), "dtype": sweep.dtype},
              "copy_bandwidth_gbs": bandwidth / 1e9 if bandwidth else None,
              "not_run": [] if nano_status is None else [_not_run("nano-vllm", None, nano_status)],
              "floor": {}, "runs": []}
    clock.log(f"{result['device']}, copy bandwidth {result['copy_bandwidth_gbs'] or 0:.0f} GB/s; bubblelab "
              f"backends {','.join(backends)}; nano-vllm {nano_status or 'will run'}")
    # Phase 1, the predictable part: each model loaded once, bubblelab (default backend) and eager HF on it.
    hf_models, loaded_models = {}, {}
    for preset in sweep.presets:
        try:
            loaded = load_model(preset, dtype=sweep.dtype, device=sweep.device, seed=0, attention_backend="torch")
        except Exception as exc:   # noqa: BLE001
            traceback.print_exc()
            result["not_run"].append(_not_run("all", preset, f"load failed: {type(exc).__name__}: {_first_line(exc)}"))
            continue
        loaded_models[preset] = loaded
        result["floor"][preset] = floor(loaded, bandwidth)
        clock.log(f"{preset}: loaded, {result['floor'][preset]['weight_bytes'] / 1e9:.2f} GB of weights")
        run_bubblelab(loaded, preset, sweep, clock, backends[0], result)
        _save(result, a.out, clock)
        try:
            hf_models[preset] = (hf_causal_lm(loaded), loaded.config)
            rows, failures = bench_hf(*hf_models[preset], "hf-static", preset, sweep, clock, sweep.deadline_s)
        except Exception as exc:   # noqa: BLE001
            traceback.print_exc()
            rows, failures = [], [_not_run("hf-static", preset, f"{type(exc).__name__}: {_first_line(exc)}")]
        result["runs"] += rows
        result["not_run"] += failures
        _free(sweep.device)
        _save(result, a.out, clock)
    # Phase 1b, optional and within --budget-s: flash-attn's rows, nano-vllm, then the other extra backends.
    extra = list(backends[1:])
    stages = [b for b in extra if b == "flash-attn"] + ["nano-vllm"] + [b for b in extra if b != "flash-attn"]
    for stage in stages:
        for preset, loaded in loaded_models.items():
            if stage == "nano-vllm" and nano_status is not None:
                break
            name = "nano-vllm" if stage == "nano-vllm" else f"bubblelab[{stage}]"
            if clock.elapsed() > a.budget_s:
                result["not_run"].append(_not_run(name, preset, f"not run: past the {a.budget_s:.0f} s time "
                                                                "budget (--budget-s)"))
                continue
            if stage == "nano-vllm":
                bench_nano_vllm(loaded, preset, sweep, clock, result, a.out / "nanovllm-work")
            else:
                run_bubblelab(loaded, preset, sweep, clock, stage, result)
            _free(sweep.device)
            _save(result, a.out, clock)
    del loaded_models
    _free(sweep.device)
    # Phase 2: generate's compile path, minutes of compiling, last and within the time budget.
    for preset, (model, cfg) in hf_models.items():
        if not sweep.hf_compile or sweep.device != "cuda":
            why = "skipped (--skip-hf-compile)" if not sweep.hf_compile else "generate compiles only on CUDA"
            result["not_run"].append(_not_run("hf-static-compiled", preset, f"not run: {why}"))
            continue
        rows, failures = bench_hf(model, cfg, "hf-static-compiled", preset, sweep, clock,
                                  min(a.budget_s, sweep.deadline_s))
        result["runs"] += rows
        result["not_run"] += failures
        _save(result, a.out, clock)
    del hf_models
    _free(sweep.device)

    markdown = _save(result, a.out, clock, plot_too=True)
    print(markdown, flush=True)
    clock.log(f"wrote {a.out}/compare_engines.{{json,md,png}}")
    return result


def _save(result: dict, out: Path, clock: Clock, plot_too: bool = False) -> str:
    """Summary, floor ratios, JSON and markdown (and the plot at the end); rewritten after every phase so a
    run killed at its time limit still leaves what it finished. Never raises: returns the markdown or ''."""
    try:
        result["summary"] = summarise(result["runs"])
        floor_ratios(result["floor"], result["summary"])
        result["wall_s"] = clock.elapsed()
        (out / "compare_engines.json").write_text(json.dumps(result, indent=1, default=str))
        markdown = write_markdown(result, out / "compare_engines.md")
        if plot_too:
            plot(result, out / "compare_engines.png")
        return markdown
    except Exception as exc:   # noqa: BLE001
        traceback.print_exc()
        clock.log(f"writing the outputs failed: {type(exc).__name__}: {_first_line(exc)}")
        return ""


def _not_run(engine: str, preset: str | None, reason: str) -> dict:
    return {"engine": engine, "preset": preset, "reason": reason}


def _progress(row: dict) -> str:
    busy = f", busy {100 * row['gpu_busy']:.0f}%" if row.get("gpu_busy") is not None else ""

    def num(key: str, fmt: str) -> str:
        return "-" if row.get(key) is None else format(row[key], fmt)
    return (f"{row['preset']} {row['engine']} streams={row['streams']} repeat={row['repeat']}: "
            f"{num('decode_tokens_per_s', '.0f')} decode tok/s, step {num('step_ms', '.3f')} ms{busy}, "
            f"{num('e2e_tokens_per_s', '.0f')} e2e tok/s")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else ""


def _last_error_line(text: str) -> str:
    """The last line that looks like an exception (`Name: message`) of a child's output, else its last line."""
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    for ln in reversed(lines):
        if ln and not ln.startswith((" ", "\t")) and ":" in ln and ln.split(":")[0].replace(".", "").isidentifier():
            return ln[:300]
    return lines[-1][:300] if lines else "(no output)"


def _free(device: str) -> None:
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--nano-worker":
        nano_worker(json.loads(sys.argv[2]))
    else:
        main()
