"""The hand-written decode loops tools/traces/foreign_engines.py runs as workers: a jitted JAX
step and a CuPy loop (both sampling on the host), and a small torch model replayed one CUDA graph
per layer or under torch.compile(mode="reduce-overhead") (both reading the sampled tokens back).
Each brackets its timed steps with cudaProfilerStart/Stop and fills the worker's `info`."""

from __future__ import annotations

import os
import time

TEMPERATURE = 0.6  # every traced workload samples at the nano-vllm write-up's temperature


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
    _ran(info, wall, batch, steps, engine_version=f"jax {jax.__version__}",
         workload=f"batch {batch}, {steps} decode steps of a {layers}-layer dim-{dim} transformer "
         "(random bf16 weights), temperature sampling on the host (numpy)")  # fmt: skip


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
    _profiler(True)
    wall = run(steps)
    _profiler(False)
    _ran(info, wall, batch, steps, engine_version=f"cupy {cp.__version__}",
         workload=f"batch {batch}, {steps} decode steps of an {layers}-layer dim-{dim} MLP stack "
         "(random fp32 weights, cuBLAS matmuls, an elementwise GELU kernel), sampling on the "
         "host")  # fmt: skip


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
    _ran(info, wall, batch, steps, torch=torch.__version__, **facts)


def _ran(info: dict, wall: float, batch: int, steps: int, **facts) -> None:
    """What index.json says of a loop's traced run: `batch` rows each generating `steps` tokens
    in `wall` seconds, and the worker's own facts (engine version, workload)."""
    info.update(
        requests=batch,
        mean_generated_len=steps,
        runs={"raw": {"wall_s": wall, "generated_tokens": batch * steps}},
        **facts,
    )
