"""`bubblelab run` as a library: one engine, one workload per streams value and depth, with
per-request latency. Everything is validated by `plan_runs` before a model is loaded."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..core.checks import parse_ints
from ..engine.config import MAX_NUM_SEQS, EngineConfig, default_dtype
from ..engine.llm_engine import LLMEngine
from .driver import RunResult, run_workload
from .workload import MAX_STREAMS, WorkloadSpec, check_streams_fit


@dataclass
class RunPlan:
    engine: EngineConfig  # at depths[0]
    workloads: list[WorkloadSpec]
    depths: list[int] = field(default_factory=lambda: [2])  # each workload at each, in this order


def plan_runs(
    *,
    streams: str | int | list[int],
    model: str | None = None,
    device: str = "cpu",
    dtype: str | None = None,
    depth: str | int | list[int] = 2,
    tensor_parallel: int = 1,
    max_num_seqs: int | None = None,
    max_model_len: int = 512,
    enforce_eager: bool = False,
    compile: bool | None = None,
    attention_backend: str = "auto",
    seed: int = 0,
    constraint: str | None = None,
    constrained_share: float | None = None,
    **workload: Any,
) -> RunPlan:
    """The engine and one workload per streams value, every option checked; nothing loaded yet.
    depth: one or several ('1,2': each workload at depth 1, then at depth 2, on one engine).
    workload: the other WorkloadSpec fields (requests, output_len_mean, prompt_len, ...)."""
    counts = parse_ints("streams", streams, 1, MAX_STREAMS)
    depths = parse_ints("depth", depth, 1, 2)
    config = EngineConfig(
        model=model,
        device=device,
        dtype=default_dtype(device) if dtype is None else dtype,  # '' is refused, not defaulted
        depth=depths[0],
        tensor_parallel=tensor_parallel,
        # One batch-row budget for every run: one engine, as a sweep has.
        max_num_seqs=max_num_seqs
        if max_num_seqs is not None
        else min(max(*counts, 8), MAX_NUM_SEQS),
        max_model_len=max_model_len,
        enforce_eager=enforce_eager,
        compile=compile,
        attention_backend=attention_backend,
        seed=seed,
    )
    if max_num_seqs is None:
        check_streams_fit(counts, MAX_NUM_SEQS)
    else:
        check_streams_fit(counts, max_num_seqs, "--max-num-seqs")
    share = constrained_share if constrained_share is not None else (1.0 if constraint else 0.0)
    specs = [
        WorkloadSpec(
            streams=s, constraint=constraint, constrained_share=share, seed=seed, **workload
        )
        for s in counts
    ]
    for spec in specs:
        spec.check_fits(config.max_model_len)
    return RunPlan(config, specs, depths)


def run_plan(
    plan: RunPlan,
    *,
    on_start: Callable[[WorkloadSpec, int], Callable[[int], None] | None] | None = None,
    engine: LLMEngine | None = None,
) -> list[RunResult]:
    """Run every workload of the plan at each of its depths on one engine (loaded here unless
    given), with latency; a workload's depths back to back. on_start(spec, depth) is told each
    run as it starts and may return a per-request progress callback."""
    own = engine is None
    engine = engine or LLMEngine(plan.engine)
    results = []
    try:
        for spec in plan.workloads:
            for depth in plan.depths:
                if engine.config.depth != depth:
                    engine.set_depth(depth)
                progress = on_start(spec, depth) if on_start else None
                results.append(run_workload(engine, spec, latency=True, progress=progress))
        return results
    finally:
        if own:
            engine.close()


def run_record(result: RunResult) -> dict:
    """One run as `bubblelab run --json` writes it: summary, latency, and every request."""
    return {
        "summary": result.summary,
        "latency": result.latency,
        "requests": {
            rid: {
                "token_ids": ids,
                "finish_reason": result.finish_reasons[rid],
                **result.request_latency.get(rid, {}),
            }
            for rid, ids in sorted(result.outputs.items())
        },
    }
