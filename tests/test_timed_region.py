"""A timed run meets nothing a warm engine should not (issue #25 item 1): every shape it runs was
warmed first, no garbage collection pauses it, and whatever does intrude (a compile, a capture, a
collection, a new shape) is counted and flags the run."""

from __future__ import annotations

import gc

import pytest
import torch

from bubblelab.core.timeline import StepInfo, Timeline
from bubblelab.engine.sampling_params import SamplingParams
from bubblelab.runs import region
from bubblelab.runs.driver import run_workload
from bubblelab.runs.warmup import needed_shapes, prefill_sizes
from bubblelab.runs.workload import WorkloadSpec
from tests.engine_helpers import make_engine

# Lengths that vary, so requests end one by one and prompts are admitted in groups of every size;
# a token budget of 3 prompts, so the admission splits the first wave.
SPEC = WorkloadSpec(streams=5, requests=15, output_len_mean=8, prompt_len=4, seed=3)


def hooked(engine, hook):
    """engine.step calls hook() first, every step."""
    step = engine.step

    def stepped():
        hook()
        return step()

    engine.step = stepped
    return engine


@pytest.mark.parametrize("depth", [1, 2])
def test_every_shape_of_a_timed_run_was_warmed_first(tiny_llama, depth):
    engine = make_engine(tiny_llama, depth=depth, max_num_batched_tokens=12)
    s = run_workload(engine, SPEC).summary
    assert s["warmup_missing"] == [] and s["new_shapes_in_run"] == 0, s["new_shapes"]
    # What the run can reach, the warm-up ran: prefills of 1 to 3 prompts, decodes of 1 to 5 rows.
    assert list(prefill_sizes(SPEC, 8, 12)) == [1, 2, 3]
    assert needed_shapes(engine, SPEC) <= engine.runner.shapes
    assert {("decode", r) for r in range(1, 6)} <= engine.runner.shapes
    assert s["compiles_in_run"] == s["captures_in_run"] == s["gc_in_run"] == 0
    # A slow step is the CPU's noise, not a warm-up miss; "1 step" and "n steps" are both that flag.
    assert all(f.endswith("x the run's median") for f in s["timing_flags"]), s["timing_flags"]
    # The engine remembers: the next run of the same workload warms no shape, only settles.
    again = run_workload(engine, SPEC).summary
    assert again["warmup_requests"] == SPEC.streams and again["new_shapes_in_run"] == 0


def test_without_warm_up_the_new_shapes_are_counted_and_flag_the_run(tiny_llama):
    s = run_workload(make_engine(tiny_llama, max_num_batched_tokens=12), SPEC, warmup=False).summary
    assert s["new_shapes_in_run"] >= 5  # at least its decode sizes and its first prefill
    assert any(f.startswith("ran new shapes") for f in s["timing_flags"])


def test_open_loop_arrivals_meet_no_new_shape(tiny_llama):
    spec = WorkloadSpec(streams=4, requests=12, output_len_mean=6, prompt_len=3,
                        arrival_rate=400.0, seed=1)  # fmt: skip
    s = run_workload(make_engine(tiny_llama, depth=2), spec).summary
    assert s["new_shapes_in_run"] == 0, s["new_shapes"]


def test_garbage_collection_is_off_inside_the_timed_region_and_back_on_after(tiny_llama):
    seen = []
    engine = hooked(make_engine(tiny_llama), lambda: seen.append(gc.isenabled()))
    assert gc.isenabled()
    s = run_workload(engine, SPEC).summary
    # The warm-up's steps ran with the collector on, the timed run's with it off.
    timed = s["decode_steps"] + s["prefill_steps"]
    assert seen[-timed:] == [False] * timed and any(seen[:-timed])
    assert gc.isenabled() and s["gc_disabled_in_run"] and s["gc_in_run"] == 0


def test_what_intrudes_on_a_timed_run_is_counted_and_flagged(tiny_llama):
    """A collection asked for, a torch.compile frame and a graph capture inside the timed region:
    each counted, each a flag."""
    engine = make_engine(tiny_llama)
    run_workload(engine, SPEC)  # warm
    compiled = torch.compile(lambda x: x * 2, backend="eager")
    calls = []

    def intrude():
        if not calls and not gc.isenabled():  # the timed region's first step (not the warm-up's)
            gc.collect()
            compiled(torch.ones(3))
            engine.runner.graphs.captures += 1
            calls.append(1)

    s = run_workload(hooked(engine, intrude), SPEC).summary
    assert s["gc_in_run"] >= 1 and s["gc_pause_ms_in_run"] > 0
    assert s["compiles_in_run"] == 1 and s["captures_in_run"] == 1
    text = " ".join(s["timing_flags"])
    assert "compiled (1)" in text and "captured CUDA graphs (1)" in text
    assert "collected garbage" in text


def test_step_profile_names_the_slowest_steps_and_the_host_share():
    """Ten 1 ms decode steps, busy 0.8 ms each, and one 10 ms step: the slow one is named, and the
    device idled 0.2 ms of each millisecond (and all of the slow step's extra 9 ms)."""
    t = Timeline(depth=1)
    start = 0
    for step in range(12):
        t.add_step(StepInfo(step, "decode", 4, 4))
        t.add_device("forward", step, start, start + 600_000)
        t.add_device("sampling", step, start + 600_000, start + 800_000)
        start += 10_000_000 if step == 5 else 1_000_000
    p = region.step_profile(t, wall_s=0.03)
    assert p["slow_steps"] == 1 and p["step_ms_max"] == pytest.approx(10.0)
    assert p["slowest_steps"][0] == {
        "step": 5, "kind": "decode", "rows": 4, "period_ms": 10.0, "x_median": 10.0
    }  # fmt: skip
    span = start - 1_000_000 + 800_000
    assert p["host_share"] == pytest.approx(1 - 12 * 800_000 / span)
    assert p["outside_steps_s"] == pytest.approx(0.03 - span / 1e9)
    assert region.flags(p) == ["1 step over 3x the run's median"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("depth", [1, 2])
def test_a_warm_cuda_run_compiles_captures_and_allocates_nothing(depth):
    """On the GPU: graphs captured and replayed once at start-up, the run's shapes warmed, so the
    timed region compiles nothing, captures nothing and takes no new device memory."""
    from bubblelab.core.timeline import Timeline as Fresh
    from bubblelab.engine.config import EngineConfig
    from bubblelab.engine.llm_engine import LLMEngine
    from bubblelab.engine.loader import load_model

    loaded = load_model("tiny-qwen3", dtype="bf16", device="cuda", seed=0)
    config = EngineConfig(model="tiny-qwen3", device="cuda", dtype="bf16", depth=depth,
                          max_num_seqs=16, max_model_len=256)  # fmt: skip
    engine = LLMEngine(config, loaded, timeline=Fresh())
    assert engine.runner.graphs.captures > 0
    spec = WorkloadSpec(streams=16, requests=64, output_len_mean=24, prompt_len=16, seed=2)
    s = run_workload(engine, spec).summary
    assert s["compiles_in_run"] == s["captures_in_run"] == s["new_shapes_in_run"] == 0
    assert s["device_allocs_in_run"] == 0 and s["alloc_retries_in_run"] == 0
    assert s["reserved_growth_mb_in_run"] == 0
    engine.close()


@pytest.mark.parametrize("constraint", ["point", "detect"])
def test_constrained_workloads_warm_up_with_outputs_long_enough(tiny_llama, constraint):
    """A point output takes several tokens: the warm-up's one-token requests would be refused
    (max_tokens too small), so a constrained workload's warm-up asks each for its shortest output
    more, and still warms every shape."""
    engine = make_engine(tiny_llama, max_num_batched_tokens=12)
    shortest = engine.min_tokens(SamplingParams(constraint=constraint))
    assert shortest > 2  # the case the warm-up must meet
    spec = WorkloadSpec(streams=3, requests=6, output_len_mean=shortest + 6, prompt_len=4, seed=2,
                        constraint=constraint, constrained_share=1.0)  # fmt: skip
    s = run_workload(engine, spec).summary
    assert s["warmup_missing"] == [] and s["new_shapes_in_run"] == 0, s["new_shapes"]


def test_a_runs_steady_step_median_is_the_prediction_tables(tiny_llama):
    """The repeat rule's median-step CV reads each run's summary (steady_step_ms_median); the
    prediction table's reads the run's per-step table through core.steady. Same steps, same
    median, so the sweep's verdict and the table print one CV."""
    from bubblelab.core.steady import steady_state
    from bubblelab.profiling.analysis import per_step_from_timeline

    engine = make_engine(tiny_llama, depth=2)
    result = run_workload(engine, WorkloadSpec(streams=4, requests=8, output_len_mean=24,
                                               prompt_len=4, seed=9))  # fmt: skip
    steps = steady_state(per_step_from_timeline(result.timeline, "r", 2))
    assert len(steps) > 5
    assert result.summary["steady_step_ms_median"] == pytest.approx(steps["period_ms"].median())


def test_what_the_timed_region_froze_is_freed_at_exit(tmp_path):
    """gc.freeze keeps the engine out of every later collection, and once kept it out of the last
    one at exit too: Triton's nanobind then printed ~40 lines of 'leaked' objects after every CPU
    sweep (the demo's last screen). The region hands them back to the collector at exit."""
    import subprocess
    import sys

    code = (
        "from pathlib import Path\n"
        "from bubblelab.runs.sweep import SweepSpec, run_sweep\n"
        "spec = SweepSpec(model='tiny-llama', streams=[1], output_len_mean=4,"
        " requests_per_stream=1, repeats=1, max_model_len=64)\n"
        f"run_sweep(spec, Path({str(tmp_path / 'run')!r}), use_nsys=False, say=lambda _: None)\n"
        "import gc\n"
        "assert gc.get_freeze_count() > 0\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "leaked" not in done.stderr, done.stderr[-2000:]
