"""The engines tools/traces/make_foreign_traces.py profiles, one per process: `python3 -m
tools.traces.foreign_engines WORKER JOB_JSON` from the checkout's root, under nsys (except `ckpt`).
Each brackets the work it wants traced with cudaProfilerStart/Stop (nsys
--capture-range=cudaProfilerApi) after a warm-up, and writes JOB["info"]: what ran (engine version,
workload, tokens, wall seconds).

  ckpt      seeded random weights of bubblelab presets as HF checkpoints (engine.export.to_hf),
            for nano-vllm
  nano      the original nano-vllm (GeeeekExplorer), the write-up's workload twice: raw, then
            0.3 s idle, then with one NVTX range per LLMEngine.step (patched from outside,
            domain "nano-vllm")
  nano-tp2  the original nano-vllm at tensor parallel 2 (one process a GPU), the write-up's
            workload once after a small warm-up, traced whole: only rank 0 could start a capture
  fork      PyPI nano-vllm-fork on the same workload (its `.item()` per sequence: 129 host syncs
            a step)
  hf        transformers generate, static cache, eager (compile disabled), 4 requests
  jax, cupy, graphs, compiled
            hand-written decode loops (tools/traces/foreign_loops.py): a jitted JAX step and a
            CuPy loop sampling on the host; a torch model replayed one CUDA graph per layer, or
            under torch.compile(mode="reduce-overhead"), reading its tokens back each step
"""

from __future__ import annotations

import atexit
import inspect
import json
import os
import sys
import time
from pathlib import Path

from tools.traces.foreign_loops import (
    TEMPERATURE,
    cupy_decode,
    jax_decode,
    torch_compiled,
    torch_graphs,
)

PROMPTS, MIN_LEN, MAX_LEN, MAX_TOKENS = 128, 20, 80, 64  # the write-up's workload, at TEMPERATURE
WORKLOAD = (
    f"{PROMPTS} prompts of {MIN_LEN}-{MAX_LEN} random tokens, max_tokens {MAX_TOKENS}, "
    f"temperature {TEMPERATURE}, ignore_eos"
)


def main() -> None:
    worker, job = sys.argv[1], json.loads(sys.argv[2])
    info = {"worker": worker, "python": sys.version.split()[0]}
    try:
        WORKERS[worker](job, info)
    finally:
        Path(job["info"]).write_text(json.dumps(info, indent=1, default=str))


def write_checkpoints(job: dict, info: dict) -> None:
    import torch
    from safetensors.torch import save_file

    from bubblelab.engine.export import to_hf
    from bubblelab.engine.loader import load_model

    for preset, directory in job["checkpoints"].items():
        t = time.perf_counter()
        loaded = load_model(preset, dtype="bf16", device="cuda", seed=0, attention_backend="torch")
        raw, state = to_hf(loaded)
        Path(directory).mkdir(parents=True, exist_ok=True)
        # a copy gives each split view its own storage (safetensors refuses shared ones)
        save_file(
            {n: t.detach().to("cpu", copy=True).contiguous() for n, t in state.items()},
            str(Path(directory) / "model.safetensors"),
        )
        (Path(directory) / "config.json").write_text(json.dumps(raw))
        info[preset] = {"seconds": round(time.perf_counter() - t, 1), "dir": directory}
        del loaded, state
        torch.cuda.empty_cache()


class StubTokenizer:
    """nano-vllm's tokenizer, for token-id prompts and random weights: it only needs eos and
    decode."""

    eos_token_id = -1  # never sampled: every request runs to max_tokens (ignore_eos too)

    @classmethod
    def from_pretrained(cls, *args, **kwargs) -> StubTokenizer:
        return cls()

    def encode(self, text: str) -> list[int]:
        return [1]

    def decode(self, ids) -> str:
        return ""


def _prompts(seed: int, vocab: int) -> list[list[int]]:
    import random

    rng = random.Random(seed)
    return [
        [rng.randrange(vocab) for _ in range(rng.randint(MIN_LEN, MAX_LEN))] for _ in range(PROMPTS)
    ]


def _patch_rope() -> None:
    """Some nano-vllm versions cache get_rope and assert rope_scaling is None; transformers 5
    reports the default rope parameters there as a dict: hand them None for it."""
    import nanovllm.models.qwen3 as nq

    if "rope_scaling" not in inspect.signature(nq.get_rope).parameters:
        return
    original = nq.get_rope

    def get_rope(*args, rope_scaling=None, **kw):
        if isinstance(rope_scaling, dict) and rope_scaling.get("rope_type", "default") == "default":
            rope_scaling = None
        return original(*args, rope_scaling=rope_scaling, **kw)

    nq.get_rope = get_rope


def _nano_llm(job: dict, info: dict, is_fork: bool):
    import nanovllm

    info["nanovllm_file"] = nanovllm.__file__
    try:  # the FA2-API shim falls back to SDPA without it: not nano-vllm as its authors ship it
        import flash_attn.cute  # noqa: F401

        info["attention"] = "flash-attn-4 (FA2-API shim)"
    except Exception as exc:  # noqa: BLE001
        info["attention"] = f"SDPA fallback of the shim (flash_attn.cute: {type(exc).__name__})"
    inside = Path(nanovllm.__file__).resolve().is_relative_to(Path(job["source"]).resolve())
    if is_fork == inside:
        raise RuntimeError(f"imported the wrong nano-vllm: {nanovllm.__file__}")
    import nanovllm.engine.llm_engine as engine

    engine.AutoTokenizer = StubTokenizer  # the original loads one from the checkpoint directory
    _patch_rope()
    kwargs = dict(
        tensor_parallel_size=job.get("tensor_parallel", 1),
        enforce_eager=False,
        max_model_len=1024,
        max_num_seqs=PROMPTS,
        gpu_memory_utilization=job.get("gpu_memory_utilization", 0.5),
    )
    if is_fork:
        kwargs["tokenizer"] = StubTokenizer()
    t = time.perf_counter()
    llm = nanovllm.LLM(job["ckpt"], **kwargs)
    atexit.unregister(llm.exit)  # exited explicitly, once
    info["init_s"] = round(time.perf_counter() - t, 1)
    return llm, engine


def _generate(llm, prompts, params) -> tuple[float, int]:
    import torch

    torch.cuda.synchronize()
    t = time.perf_counter()
    outs = llm.generate(prompts, params, use_tqdm=False)
    torch.cuda.synchronize()
    return time.perf_counter() - t, sum(len(o["token_ids"]) for o in outs)


def nano(job: dict, info: dict, is_fork: bool = False) -> None:
    import torch
    from nanovllm import SamplingParams

    llm, engine = _nano_llm(job, info, is_fork)
    vocab = json.loads((Path(job["ckpt"]) / "config.json").read_text())["vocab_size"]
    params = SamplingParams(temperature=TEMPERATURE, max_tokens=MAX_TOKENS, ignore_eos=True)
    _generate(llm, _prompts(1, vocab), params)  # warm-up: compiles, graphs, caches; other prompts
    runs = {}
    torch.cuda.profiler.start()
    runs["raw"] = _generate(llm, _prompts(2, vocab), params)
    if not is_fork:
        time.sleep(0.3)  # the idle that make_foreign_traces.py cuts the trace at
        import nvtx

        step = engine.LLMEngine.step

        def annotated_step(self):
            with nvtx.annotate("LLMEngine.step", domain="nano-vllm"):
                return step(self)

        engine.LLMEngine.step = annotated_step
        runs["nvtx"] = _generate(llm, _prompts(3, vocab), params)
    torch.cuda.profiler.stop()
    info.update(workload=WORKLOAD, requests=PROMPTS, mean_generated_len=MAX_TOKENS)
    info["runs"] = {k: {"wall_s": w, "generated_tokens": n} for k, (w, n) in runs.items()}
    info["torch"] = torch.__version__
    llm.exit()


def nano_tp2(job: dict, info: dict) -> None:
    """Tensor parallel 2: rank 1 is a process nano-vllm spawns, which nothing here can make call
    cudaProfilerStart, so nsys traces the whole run (make_foreign_traces: no capture range) and the
    warm-up is kept small: 8 prompts of 8 tokens compile and capture what the workload needs."""
    from multiprocessing.shared_memory import SharedMemory

    import torch
    from nanovllm import SamplingParams

    try:  # nano-vllm's fixed-name block, left by a killed run, would fail the workers' start
        stale = SharedMemory(name="nanovllm")
        stale.close()
        stale.unlink()
    except FileNotFoundError:
        pass
    llm, _ = _nano_llm({**job, "tensor_parallel": 2}, info, is_fork=False)
    vocab = json.loads((Path(job["ckpt"]) / "config.json").read_text())["vocab_size"]
    warm = SamplingParams(temperature=TEMPERATURE, max_tokens=8, ignore_eos=True)
    _generate(llm, _prompts(1, vocab)[:8], warm)
    time.sleep(0.3)  # the idle that separates the warm-up from the traced workload
    params = SamplingParams(temperature=TEMPERATURE, max_tokens=MAX_TOKENS, ignore_eos=True)
    wall, tokens = _generate(llm, _prompts(2, vocab), params)
    info.update(workload=WORKLOAD, requests=PROMPTS, mean_generated_len=MAX_TOKENS,
                tensor_parallel=2, torch=torch.__version__)  # fmt: skip
    info["runs"] = {"raw": {"wall_s": wall, "generated_tokens": tokens}}
    llm.exit()


def fork(job: dict, info: dict) -> None:
    import importlib.metadata

    info["engine_version"] = importlib.metadata.version("nano-vllm-fork")
    nano(job, info, is_fork=True)


def hf(job: dict, info: dict) -> None:
    # eager generate: no auto-compile of the static-cache path
    os.environ["TORCHDYNAMO_DISABLE"] = "1"
    import torch
    import transformers
    from transformers import GenerationConfig, GenerationMixin

    from bubblelab.engine.export import hf_causal_lm
    from bubblelab.engine.loader import load_model

    device = job.get("device", "cuda")  # "cpu": the CPU test's dry run of this worker
    dtype = "bf16" if device == "cuda" else "fp32"
    loaded = load_model(job["preset"], dtype=dtype, device=device, attention_backend="torch")
    model = hf_causal_lm(loaded)
    assert isinstance(model, GenerationMixin), type(model)  # every *ForCausalLM generates
    eos = list(loaded.config.eos_token_ids)
    config = GenerationConfig(
        do_sample=False,
        max_new_tokens=MAX_TOKENS,
        min_new_tokens=MAX_TOKENS,
        cache_implementation="static",
        disable_compile=True,
        eos_token_id=eos or None,
        pad_token_id=eos[0] if eos else 0,
    )
    gen = torch.Generator().manual_seed(0)
    prompts = torch.randint(0, loaded.config.vocab_size, (4, 48), generator=gen).to(device)
    mask = torch.ones_like(prompts)
    model.generate(prompts, attention_mask=mask, generation_config=config)  # type: ignore[misc, unused-ignore]
    cuda = device == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
    t = time.perf_counter()
    ids = model.generate(prompts, attention_mask=mask, generation_config=config)  # type: ignore[misc, unused-ignore]
    assert isinstance(ids, torch.Tensor)  # not a dict: return_dict_in_generate is off
    if cuda:
        torch.cuda.synchronize()
    wall = time.perf_counter() - t
    if cuda:
        torch.cuda.profiler.stop()
    info.update(
        engine_version=transformers.__version__,
        torch=torch.__version__,
        model=f"{job['preset']} (seeded random weights)",
        workload=f"4 requests of 48 random tokens, {MAX_TOKENS} new tokens each, greedy, "
        "static cache, eager",
        requests=4,
        mean_generated_len=MAX_TOKENS,
        runs={"raw": {"wall_s": wall, "generated_tokens": int((ids.shape[1] - 48) * 4)}},
    )


WORKERS = {
    "ckpt": write_checkpoints,
    "nano": nano,
    "nano-tp2": nano_tp2,
    "fork": fork,
    "hf": hf,
    "jax": jax_decode,
    "cupy": cupy_decode,
    "graphs": torch_graphs,
    "compiled": torch_compiled,
}

if __name__ == "__main__":
    main()
