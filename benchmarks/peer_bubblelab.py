"""bubblelab's side of compare_nanovllm: depth 1 and depth 2 engines on one loaded model, each case
run the way a user runs the engine (engine.driver.drive, no timeline), timed on the host."""

from __future__ import annotations

import time
from collections.abc import Sequence

from benchmarks.peer_workloads import Case
from bubblelab.engine.config import EngineConfig
from bubblelab.engine.llm_engine import LLMEngine
from bubblelab.engine.loader import LoadedModel
from bubblelab.engine.sampling_params import SamplingParams
from bubblelab.runs.driver import drive
from bubblelab.runs.workload import Request


def build_engines(
    loaded: LoadedModel,
    preset: str,
    device: str,
    dtype: str,
    backend: str,
    cases: Sequence[Case],
    tensor_parallel: int = 1,
    nvtx: bool = False,
) -> dict[int, LLMEngine]:
    """{depth: engine} for depth 1 and 2, sized for the longest request and the most streams of
    `cases` (the KV pool holds every request in flight at full length; nothing is preempted); the
    rest at the engine's defaults, as nano-vllm runs at its own (both prefill (a)'s 6,483 prompt
    tokens in one step). At tensor parallel > 1 one engine (its worker processes load their own
    shards of the same seeded weights) serves both depths: run_case switches it
    (LLMEngine.set_depth), so the two depths share one set of workers. nvtx: the engines mark
    their phases for nsys."""
    longest = max(len(p) + m for c in cases for p, m in zip(c.prompts, c.max_tokens, strict=True))
    multiple = getattr(loaded.model.attn_backend, "block_size_multiple", 1)
    # the engine's default page, raised to a multiple the backend accepts (flash-attn 2: 256)
    block_size = multiple * -(-16 // multiple)
    engines: dict[int, LLMEngine] = {}
    try:
        for depth in (1, 2):
            if tensor_parallel > 1 and engines:
                engines[depth] = engines[1]
                continue
            config = EngineConfig(
                model=preset,
                device=device,
                dtype=dtype,
                depth=depth,
                max_num_seqs=max(c.streams for c in cases),
                max_model_len=longest + 1,
                block_size=block_size,
                attention_backend=backend,
                tensor_parallel=tensor_parallel,
            )
            engines[depth] = LLMEngine(config, loaded if tensor_parallel == 1 else None, nvtx=nvtx)
    except Exception:
        close_engines(engines)
        raise
    return engines


def run_case(engine: LLMEngine, case: Case, depth: int | None = None) -> dict:
    """Every request of `case` through the engine with at most case.streams in flight (at `depth`
    when given: an engine serving both depths is switched first)."""
    if depth is not None and engine.config.depth != depth:
        engine.set_depth(depth)
    requests = [
        Request(
            f"{case.name}-{i}",
            prompt,
            SamplingParams(
                temperature=case.temperature, max_tokens=n, ignore_eos=True, seed=1_000_003 + i
            ),
            0.0,
        )
        for i, (prompt, n) in enumerate(zip(case.prompts, case.max_tokens, strict=True))
    ]
    engine.streams.synchronize()
    t = time.perf_counter()
    outputs, _ = drive(engine, requests, case.streams)
    engine.streams.synchronize()
    wall = time.perf_counter() - t
    return {"wall_s": wall, "generated_tokens": sum(len(ids) for ids in outputs.values())}


def close_engines(engines: dict) -> None:
    for engine in {id(e): e for e in engines.values()}.values():  # one engine may serve both depths
        engine.close()
    engines.clear()
