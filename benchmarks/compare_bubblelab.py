"""compare_engines, part 1: bubblelab itself, depth 1 and depth 2 per attention backend, on the
loaded weights; per-step numbers from the engine's own CUDA-event timing, steady state only."""

from __future__ import annotations

import traceback

import numpy as np

from benchmarks.attention import use_backend
from benchmarks.compare_common import Clock, Sweep, first_line, free_memory, not_run, progress
from bubblelab.core.timeline import Timeline
from bubblelab.engine.attention import select_backend
from bubblelab.engine.config import EngineConfig
from bubblelab.engine.llm_engine import LLMEngine
from bubblelab.engine.loader import LoadedModel
from bubblelab.profiling.analysis import per_step_from_timeline, steady_state
from bubblelab.runs.driver import RunResult, run_workload
from bubblelab.runs.workload import WorkloadSpec


def engine_label(depth: int, backend: str, sweep: Sweep) -> str:
    """bubblelab-dN for the default (first) backend, bubblelab-dN[<backend>] for the others."""
    return (
        f"bubblelab-d{depth}" if backend == sweep.backends[0] else f"bubblelab-d{depth}[{backend}]"
    )


def bench_bubblelab(
    loaded: LoadedModel, preset: str, sweep: Sweep, clock: Clock, backend: str, rows: list[dict]
) -> None:
    """Depth 1 and 2 back to back per repeat and stream count, one engine per depth for the whole
    sweep, with attention backend `backend`. Rows are appended to `rows` as they come, so a failure
    keeps the finished ones. Raises on failure (the caller records it); stops early (returns) past
    sweep.deadline_s."""
    impl = use_backend(loaded.model, select_backend(backend, sweep.device))
    flavour = getattr(impl, "impl", None)  # flash-attn: fa4 or fa2
    attention = backend + (f"({flavour})" if flavour else "")
    block_size = sweep.block_size
    if block_size % impl.block_size_multiple:
        block_size = impl.block_size_multiple * -(-block_size // impl.block_size_multiple)
    # the longest request: no wasted width
    max_model_len = sweep.prompt_len + int(np.ceil(1.5 * sweep.L)) + 1
    engines: dict[int, LLMEngine] = {}
    try:
        for depth in (1, 2):
            engines[depth] = LLMEngine(
                EngineConfig(
                    model=preset,
                    device=sweep.device,
                    dtype=sweep.dtype,
                    depth=depth,
                    max_num_seqs=max(sweep.streams),
                    max_model_len=max_model_len,
                    block_size=block_size,
                    attention_backend=backend,
                ),
                loaded,
                timeline=Timeline(),
            )
        clock.log(
            f"{preset}: bubblelab engines ready, attention {attention}, block size {block_size} "
            f"(graphs captured: {engines[2].runner.graphs.captured})"
        )
        for repeat in range(sweep.repeats):
            for streams in sweep.streams:
                if clock.elapsed() > sweep.deadline_s:
                    raise TimeoutError(
                        f"stopped before repeat {repeat} streams={streams}: past the "
                        f"{sweep.deadline_s:.0f} s deadline (--deadline-s)"
                    )
                spec = WorkloadSpec(
                    streams=streams,
                    requests=sweep.requests_per_stream * streams,
                    output_len_mean=sweep.L,
                    prompt_len=sweep.prompt_len,
                    seed=repeat,
                )
                for depth, engine in engines.items():
                    row = {
                        "engine": engine_label(depth, backend, sweep),
                        "attention": attention,
                        "preset": preset,
                        "streams": streams,
                        "repeat": repeat,
                        **bubblelab_metrics(run_workload(engine, spec), depth),
                    }
                    rows.append(row)
                    clock.log(progress(row))
    finally:
        for engine in engines.values():
            try:
                engine.close()
            except Exception as exc:  # noqa: BLE001 - a failed close must not hide the real error
                why = f"{type(exc).__name__}: {first_line(exc)}"
                clock.log(f"{preset} {backend}: engine close failed: {why}")
        engines.clear()
        free_memory(sweep.device)


def run_bubblelab(
    loaded: LoadedModel, preset: str, sweep: Sweep, clock: Clock, backend: str, result: dict
) -> None:
    """bench_bubblelab with any failure (build, compile, capture, run, deadline) recorded in
    not_run."""
    rows: list[dict] = []
    try:
        bench_bubblelab(loaded, preset, sweep, clock, backend, rows)
    except Exception as exc:  # noqa: BLE001 - a backend that cannot run is a result, not a crash
        if not isinstance(exc, TimeoutError):
            traceback.print_exc()
        reason = f"{type(exc).__name__}: {first_line(exc)}"
        if rows:
            reason = f"partial ({len(rows)} rows): {reason}"
        result["not_run"].append(not_run(f"bubblelab[{backend}]", preset, reason))
        clock.log(f"{preset} bubblelab[{backend}] not run: {reason}")
        free_memory(sweep.device)
    result["runs"] += rows


def bubblelab_metrics(result: RunResult, depth: int) -> dict:
    """Steady-state decode from the engine's own device timing; end-to-end numbers from the whole
    run."""
    steady = steady_state(per_step_from_timeline(result.timeline, "run", depth))
    period = steady.period_ms.sum()
    s = result.summary
    return {
        "decode_tokens_per_s": 1e3 * steady.batch_size.sum() / period if period else float("nan"),
        "step_ms": float(steady.period_ms.median()),
        "forward_ms": float(steady.forward_ms.median()),
        "gpu_busy": float((steady.forward_ms + steady.sampling_ms).sum() / period)
        if period
        else float("nan"),
        "prefill_ms": None,
        "e2e_tokens_per_s": s["tokens_per_s"],
        "wall_s": s["wall_s"],
        "generated_tokens": s["generated_tokens"],
        "mean_output_len": s["mean_generated_len"],
        "steady_steps": len(steady),
        "steady_batch": int(steady.batch_size.median()) if len(steady) else None,
    }
