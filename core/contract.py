"""The run contract (docs/phases.md): the names the engine records under and the per-step table that
profiling computes and the cost model reads.

The timeline record is core/timeline.py and the steady-state rule core/steady.py. Nothing here needs
torch, CUDA or DuckDB, so a trace can be analysed and a results file predicted from on a laptop.
"""

from __future__ import annotations

DOMAIN = "bubblelab"  # the NVTX domain of the engine's ranges; each range's payload is its step id
# One range per run of a sweep's nsys pass, named for the run's tag, around its timed region: the
# pass is one capture range (runs.passes) and its export is cut into one trace per run by these.
RUN_DOMAIN = "bubblelab.run"
# The named host phases of the loop, one NVTX range and one timeline record each (docs/phases.md).
HOST_PHASES = (
    "plan",
    "launch",
    "copy_h2d",
    "forward",
    "prefill",
    "finalize",
    "mask",
    "sampling",
    "copy_d2h",
    "commit",
    "wait",
)
# The per-step table's host columns (<phase>_ms): the loop's top-level phases and the intended wait.
STEP_HOST_PHASES = ("plan", "launch", "commit", "finalize", "wait")

# Column kinds, as a reader checks them (runs.rundir): text, or numbers (missing: NaN).
TEXT, NUMBER = "text", "number"
# The per-step table, one row per step of a run, in the order profiling/sql/per_step.sql writes it;
# the same columns from nsys, the in-process timeline and the cost model's simulator.
STEP_TABLE: dict[str, str] = {
    "run_id": TEXT,
    "step": NUMBER,
    "kind": TEXT,  # "decode" | "prefill" (core.pipeline.StepKind)
    "depth": NUMBER,
    "batch_size": NUMBER,
    "forward_ms": NUMBER,
    "sampling_ms": NUMBER,
    "busy_ms": NUMBER,
    "bubble_ms": NUMBER,
    "kernel_gap_ms": NUMBER,
    "period_ms": NUMBER,
    **{f"{phase}_ms": NUMBER for phase in STEP_HOST_PHASES},
    "gpu_start_ns": NUMBER,
    "gpu_end_ns": NUMBER,
}
STEP_COLUMNS = tuple(STEP_TABLE)
# kernel_gap_ms came with catalog layout 3: an older results file lacks it and readers fall back.
REQUIRED_STEP_COLUMNS = tuple(c for c in STEP_COLUMNS if c != "kernel_gap_ms")
