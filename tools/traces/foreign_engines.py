"""The engines tools/traces/make_foreign_traces.py profiles, one per process: `python3
foreign_engines.py WORKER JOB_JSON`, run under nsys (except `ckpt`). Each brackets the work it wants
traced with cudaProfilerStart/Stop (nsys --capture-range=cudaProfilerApi) after a warm-up, and
writes JOB["info"]: what ran (engine version, workload, tokens, wall seconds).

  ckpt    seeded random weights of bubblelab presets as HF checkpoints (engine.export.to_hf), for
  nano-vllm nano    the original nano-vllm (GeeeekExplorer), the write-up's workload twice: raw,
  then 0.3 s idle, then
          with one NVTX range per LLMEngine.step (patched from outside, domain "nano-vllm")
  nano-tp2  the original nano-vllm at tensor parallel 2 (one process a GPU), the write-up's
          workload once after a small warm-up, traced whole: only rank 0 could start a capture range
  fork    PyPI nano-vllm-fork on the same workload (its `.item()` per sequence: 129 host syncs a
  step) hf      transformers generate, static cache, eager (compile disabled), 4 requests
  jax     a jitted decode step of a small transformer with host-side sampling (numpy), 200 steps
  cupy    a small decode loop in CuPy (cuBLAS matmuls, elementwise kernels), host-side sampling, 200
  steps
  graphs  a torch decode loop captured one CUDA graph per layer (13 replays a step), eager sampling,
          the sampled tokens read back by the host: a step is several graph replays
  compiled  the same model under torch.compile(mode="reduce-overhead"): CUDA-graph trees replayed
          among eager kernels (input copies, sampling), the tokens read back each step
"""

from __future__ import annotations

import atexit
import inspect
import json
import os
import sys
import time
from pathlib import Path

PROMPTS, MIN_LEN, MAX_LEN, MAX_TOKENS, TEMPERATURE = 128, 20, 80, 64, 0.6  # the write-up's workload
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


def _profiler(on: bool) -> None:
    """cudaProfilerStart/Stop for a process that has no torch: CuPy's runtime call (one primary
    context per device, which JAX uses as well)."""
    import cupy

    (cupy.cuda.runtime.profilerStart if on else cupy.cuda.runtime.profilerStop)()


def jax_decode(job: dict, info: dict) -> None:
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import jax
    import jax.numpy as jnp
    import numpy as np

    batch, length, dim, heads, layers, vocab, steps = (
        8,
        256,
        1024,
        8,
        8,
        32000,
        job.get("steps", 200),
    )
    hd = dim // heads
    keys = iter(jax.random.split(jax.random.PRNGKey(0), 4 * layers + 2))

    def weight(*shape):
        return (jax.random.normal(next(keys), shape, jnp.float32) / np.sqrt(shape[0])).astype(
            jnp.bfloat16
        )

    params = {
        "embed": weight(vocab, dim),
        "head": weight(dim, vocab),
        "layers": [
            {
                "qkv": weight(dim, 3 * dim),
                "o": weight(dim, dim),
                "up": weight(dim, 4 * dim),
                "down": weight(4 * dim, dim),
            }
            for _ in range(layers)
        ],
    }

    def norm(x):
        return x * jax.lax.rsqrt(
            jnp.mean(x.astype(jnp.float32) ** 2, -1, keepdims=True) + 1e-6
        ).astype(x.dtype)

    def step(params, cache_k, cache_v, tokens, pos):
        x = params["embed"][tokens]  # [batch, dim]
        for i, p in enumerate(params["layers"]):
            q, k, v = jnp.split(norm(x) @ p["qkv"], 3, axis=-1)
            q, k, v = (t.reshape(batch, heads, hd) for t in (q, k, v))
            cache_k = cache_k.at[i, :, :, pos].set(k)
            cache_v = cache_v.at[i, :, :, pos].set(v)
            scores = jnp.einsum("bhd,bhtd->bht", q, cache_k[i]).astype(jnp.float32) / np.sqrt(hd)
            scores = jnp.where(jnp.arange(length) <= pos, scores, -jnp.inf)
            attn = jnp.einsum("bht,bhtd->bhd", jax.nn.softmax(scores).astype(x.dtype), cache_v[i])
            x = x + attn.reshape(batch, dim) @ p["o"]
            x = x + jax.nn.silu(norm(x) @ p["up"]) @ p["down"]
        return (norm(x) @ params["head"]).astype(jnp.float32), cache_k, cache_v

    decode = jax.jit(step, donate_argnums=(1, 2))
    rng = np.random.default_rng(0)

    def run(n: int) -> float:
        cache = [jnp.zeros((layers, batch, heads, length, hd), jnp.bfloat16) for _ in range(2)]
        tokens = jnp.asarray(rng.integers(0, vocab, batch, dtype=np.int32))
        t = time.perf_counter()
        for pos in range(n):
            logits, *cache = decode(params, *cache, tokens, pos)
            probs = np.asarray(logits, np.float64) / TEMPERATURE  # the host waits for the step here
            probs = np.exp(probs - probs.max(-1, keepdims=True))
            probs /= probs.sum(-1, keepdims=True)
            ids = [rng.choice(vocab, p=row) for row in probs]  # host-side sampling
            tokens = jnp.asarray(np.asarray(ids, np.int32))
        return time.perf_counter() - t

    run(4)  # compile
    _profiler(True)
    wall = run(steps)
    _profiler(False)
    info.update(
        engine_version=f"jax {jax.__version__}",
        workload=f"batch {batch}, {steps} decode steps of a {layers}-layer dim-{dim} transformer "
        "(random bf16 weights), temperature sampling on the host (numpy)",
        requests=batch,
        mean_generated_len=steps,
        runs={"raw": {"wall_s": wall, "generated_tokens": batch * steps}},
    )


def cupy_decode(job: dict, info: dict) -> None:
    import cupy as cp
    import numpy as np

    batch, dim, layers, vocab, steps = 8, 2048, 8, 32000, job.get("steps", 200)
    rng = np.random.default_rng(0)
    cp.random.seed(0)
    embed = (cp.random.standard_normal((vocab, dim), dtype=cp.float32) / 40).astype(cp.float32)
    ws = [
        (
            (cp.random.standard_normal((dim, dim), dtype=cp.float32) / np.sqrt(dim)).astype(
                cp.float32
            ),
            (cp.random.standard_normal((dim, dim), dtype=cp.float32) / np.sqrt(dim)).astype(
                cp.float32
            ),
        )
        for _ in range(layers)
    ]
    head = (cp.random.standard_normal((dim, vocab), dtype=cp.float32) / np.sqrt(dim)).astype(
        cp.float32
    )
    gelu = cp.ElementwiseKernel(
        "T x", "T y", "y = x * 0.5 * (1 + tanh(0.79788456 * (x + 0.044715 * x * x * x)))", "gelu"
    )

    def run(n: int) -> float:
        tokens = cp.asarray(rng.integers(0, vocab, batch))
        t = time.perf_counter()
        for _ in range(n):
            x = embed[tokens]
            for w1, w2 in ws:
                x = x + gelu(x @ w1) @ w2
            logits = (x @ head).get().astype(np.float64) / TEMPERATURE  # the host waits here
            probs = np.exp(logits - logits.max(-1, keepdims=True))
            probs /= probs.sum(-1, keepdims=True)
            tokens = cp.asarray([rng.choice(vocab, p=row) for row in probs])
        return time.perf_counter() - t

    run(4)
    cp.cuda.runtime.profilerStart()
    wall = run(steps)
    cp.cuda.runtime.profilerStop()
    info.update(
        engine_version=f"cupy {cp.__version__}",
        workload=f"batch {batch}, {steps} decode steps of an {layers}-layer dim-{dim} MLP stack "
        "(random fp32 weights, cuBLAS matmuls, an elementwise GELU kernel), sampling on the host",
        requests=batch,
        mean_generated_len=steps,
        runs={"raw": {"wall_s": wall, "generated_tokens": batch * steps}},
    )


def _mlp_stack(batch: int = 8, dim: int = 2048, layers: int = 12, vocab: int = 32000):
    """Seeded bf16 weights and one residual layer (RMS norm, up, GELU, down) of the small decode
    model the `graphs` and `compiled` workers share."""
    import torch

    gen = torch.Generator(device="cuda").manual_seed(0)

    def weight(rows: int, cols: int) -> torch.Tensor:
        w = torch.randn(rows, cols, device="cuda", generator=gen) / rows**0.5
        return w.to(torch.bfloat16)

    params = {
        "embed": weight(vocab, dim),
        "head": weight(dim, vocab),
        "layers": [(weight(dim, 4 * dim), weight(4 * dim, dim)) for _ in range(layers)],
    }

    def norm(x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype)

    def layer(x: torch.Tensor, up: torch.Tensor, down: torch.Tensor) -> torch.Tensor:
        return x + torch.nn.functional.gelu(norm(x) @ up) @ down

    shape = f"{layers}-layer dim-{dim} MLP stack (seeded bf16 weights), batch {batch}"
    return params, norm, layer, shape


def _sample(logits, rng_gen) -> list[int]:
    """Temperature sampling on the GPU; the host reads the tokens back (the step's one sync)."""
    import torch

    probs = torch.softmax(logits.float() / TEMPERATURE, -1)
    return torch.multinomial(probs, 1, generator=rng_gen).squeeze(1).tolist()


def torch_graphs(job: dict, info: dict) -> None:
    """One CUDA graph per layer plus one for the head: an engine whose decode step is 13 graph
    replays between an eager embedding gather and eager sampling closed by a host read."""
    import torch

    batch, steps = 8, job.get("steps", 200)
    params, norm, layer, shape = _mlp_stack(batch)
    tokens = torch.zeros(batch, dtype=torch.long, device="cuda")
    x = torch.zeros(batch, params["embed"].shape[1], dtype=torch.bfloat16, device="cuda")
    logits = torch.zeros(batch, params["head"].shape[1], dtype=torch.float32, device="cuda")

    def head() -> None:
        logits.copy_(norm(x) @ params["head"])

    bodies: list = [
        lambda up=up, down=down: x.copy_(layer(x, up, down)) for up, down in params["layers"]
    ]
    bodies.append(head)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm cuBLAS before capture, as torch's graph docs ask
        for body in bodies:
            body()
    torch.cuda.current_stream().wait_stream(side)
    graphs = []
    for body in bodies:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            body()
        graphs.append(g)
    rng_gen = torch.Generator(device="cuda").manual_seed(0)

    def run(n: int) -> float:
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(n):
            x.copy_(params["embed"][tokens])
            for g in graphs:
                g.replay()
            ids = _sample(logits, rng_gen)
            tokens.copy_(torch.tensor(ids), non_blocking=False)  # the next step's input, uploaded
        return time.perf_counter() - t

    run(4)
    _traced(run, batch, steps, info, engine_version=f"torch {torch.__version__}", model=shape,
            workload=f"{steps} decode steps; each: an eager embedding gather, {len(graphs)} "
            "CUDA-graph replays (one a layer, one for the head), temperature sampling on the GPU, "
            "the tokens read back by the host and uploaded as the next input",
            graphs_per_step=len(graphs))  # fmt: skip


def torch_compiled(job: dict, info: dict) -> None:
    """The same model's forward under torch.compile(mode="reduce-overhead"): inductor's kernels
    replayed as CUDA-graph trees, with eager kernels around them (the copy of each new input into
    the graph's static buffer, the sampling)."""
    import torch

    batch, steps = 8, job.get("steps", 200)
    params, norm, layer, shape = _mlp_stack(batch)

    def forward(tokens: torch.Tensor) -> torch.Tensor:
        x = params["embed"][tokens]
        for up, down in params["layers"]:
            x = layer(x, up, down)
        return (norm(x) @ params["head"]).float()

    compiled = torch.compile(forward, mode="reduce-overhead", fullgraph=True)
    rng_gen = torch.Generator(device="cuda").manual_seed(0)

    def run(n: int) -> float:
        tokens = torch.zeros(batch, dtype=torch.long, device="cuda")
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(n):
            torch.compiler.cudagraph_mark_step_begin()
            ids = _sample(compiled(tokens), rng_gen)
            tokens = torch.tensor(ids).to("cuda")
        return time.perf_counter() - t

    t = time.perf_counter()
    run(6)  # compiles, records, then replays the graph tree
    info["compile_s"] = round(time.perf_counter() - t, 1)
    _traced(run, batch, steps, info,
            engine_version=f"torch {torch.__version__} (torch.compile, mode reduce-overhead)",
            model=shape, workload=f"{steps} decode steps; each: the compiled forward (a CUDA-graph "
            "tree replay and the copy of the new tokens into its input), temperature sampling on "
            "the GPU, the tokens read back by the host")  # fmt: skip


def _traced(run, batch: int, steps: int, info: dict, **facts) -> None:
    """The torch workers' timed, traced run of `steps` steps (one capture range), and what
    index.json says of it."""
    import torch

    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    wall = run(steps)
    torch.cuda.profiler.stop()
    info.update(
        torch=torch.__version__,
        requests=batch,
        mean_generated_len=steps,
        runs={"raw": {"wall_s": wall, "generated_tokens": batch * steps}},
        **facts,
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
