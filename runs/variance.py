"""Run-to-run variance of a configuration's wall time (issue #25 item 1): the same workload
repeated, interleaved, and each repeat far from the median explained.

`measure` runs, on one engine, repeats of the same workloads (the same seed: the same requests, so
the same steps) at every stream count and depth: repeat-major, stream counts in turn, the depth
order alternating between repeats. `configuration` gives each configuration's walls, median,
coefficient of variation (CV), and each repeat more than OFF_TARGET from the median with what its
timed region met (runs.region) and where its time went against the median repeat, step by step
(`compare`: profiling's per-step table of both). benchmarks/variance.py is the command.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from ..core.timeline import Timeline
from ..core.words import counted
from ..engine.llm_engine import LLMEngine
from ..profiling.analysis import per_step_from_timeline
from .driver import RunResult, run_workload
from .workload import WorkloadSpec

CV_TARGET = 0.01
OFF_TARGET = 0.03  # a repeat this far from its configuration's median is explained, not averaged
# What the timed region met, kept per repeat (runs.region, runs.driver.GpuClocks).
REGION_KEYS = (
    "compiles_in_run", "captures_in_run", "new_shapes_in_run", "gc_in_run", "gc_pause_ms_in_run",
    "reserved_growth_mb_in_run", "alloc_retries_in_run", "device_allocs_in_run",
    "sm_clock_mhz_min", "sm_clock_mhz_median", "power_w_median", "step_ms_median", "step_ms_max",
    "slow_steps", "host_share", "outside_steps_s", "warmup_s", "timing_flags",
)  # fmt: skip
PHASES = ("period_ms", "forward_ms", "sampling_ms", "bubble_ms",
          "plan_ms", "launch_ms", "finalize_ms", "commit_ms", "wait_ms")  # fmt: skip


def measure(
    engine: LLMEngine,
    workloads: dict[int, WorkloadSpec],
    depths: list[int],
    repeats: int,
    budget_s: float = float("inf"),
    on_run: Callable[[int, int, int, RunResult], None] | None = None,
) -> tuple[dict[tuple[int, int], list[RunResult]], int]:
    """Every (streams, depth) `repeats` times, interleaved; no repeat starts once budget_s has
    passed. Returns the results per (streams, depth) and the repeats that ran. on_run(repeat,
    streams, depth, result) after each run."""
    t0 = time.perf_counter()
    runs: dict[tuple[int, int], list[RunResult]] = {}
    for r in range(repeats):
        if r and time.perf_counter() - t0 > budget_s:
            return runs, r
        for streams, spec in workloads.items():
            for depth in depths if r % 2 == 0 else depths[::-1]:
                engine.set_depth(depth)
                engine.timeline = engine.phases.timeline = Timeline()
                result = run_workload(engine, spec)
                runs.setdefault((streams, depth), []).append(result)
                if on_run is not None:
                    on_run(r, streams, depth, result)
    return runs, repeats


def configuration(streams: int, depth: int, results: list[RunResult]) -> dict:
    """One configuration's repeats: walls, median, CV, and each repeat off the median explained."""
    walls = np.array([r.summary["wall_s"] for r in results])
    median = float(np.median(walls))
    cv = float(walls.std(ddof=1) / walls.mean()) if len(walls) > 1 else float("nan")
    off = np.abs(walls / median - 1)
    ref = int(np.argmin(np.abs(walls - median)))  # the repeat nearest the median
    outliers = [
        {"repeat": int(i), "wall_s": float(walls[i]), "off": float(walls[i] / median - 1),
         "region": region(results[i]), "against_median_repeat": compare(results[i], results[ref])}
        for i in np.flatnonzero(off > OFF_TARGET)
    ]  # fmt: skip
    return {
        "streams": streams, "depth": depth, "walls_s": walls.tolist(), "median_s": median,
        "cv": cv, "max_off": float(off.max()), "median_repeat": ref,
        "met": bool(cv <= CV_TARGET and off.max() <= OFF_TARGET),
        "repeats": [region(r) for r in results], "outliers": outliers,
    }  # fmt: skip


def region(result: RunResult) -> dict:
    return {k: result.summary.get(k) for k in REGION_KEYS}


def compare(slow: RunResult, ref: RunResult) -> dict:
    """Where a repeat's extra time went against the median repeat: per phase, summed over the steps,
    and in three parts: the GPU working (forward and sampling), the GPU idle (the bubble) and the
    host working (its phases, less the commit's wait for the GPU); the time outside the steps; and
    the steps that lost the most (the same workload runs the same steps: they pair up by
    position)."""
    a = per_step_from_timeline(slow.timeline, "slow", slow.summary["depth"])
    b = per_step_from_timeline(ref.timeline, "ref", ref.summary["depth"])
    extra = {p: float(a[p].sum() - b[p].sum()) for p in PHASES if p in a and p in b}
    host = ("plan_ms", "launch_ms", "finalize_ms", "commit_ms")
    out: dict = {
        "steps": [len(a), len(b)],
        "extra_ms": extra,
        "parts_extra_ms": {
            "gpu working": extra.get("forward_ms", 0.0) + extra.get("sampling_ms", 0.0),
            "gpu idle": extra.get("bubble_ms", 0.0),
            "host working": sum(extra.get(p, 0.0) for p in host) - extra.get("wait_ms", 0.0),
        },
        "outside_steps_extra_s": float(
            (slow.summary.get("outside_steps_s") or 0) - (ref.summary.get("outside_steps_s") or 0)
        ),
    }
    if len(a) == len(b) and (a["kind"].to_numpy() == b["kind"].to_numpy()).all():
        per_step = (a["period_ms"] - b["period_ms"]).fillna(0).to_numpy()
        worst = np.argsort(-per_step)[:5]
        total = float(per_step.sum())
        out["worst_steps"] = [
            {"step": int(i), "kind": str(a["kind"].iloc[i]), "rows": int(a["batch_size"].iloc[i]),
             "period_ms": float(a["period_ms"].iloc[i]),
             "median_repeat_ms": float(b["period_ms"].iloc[i])}
            for i in worst
        ]  # fmt: skip
        # Concentrated (a few hiccups: a collection, an allocation, a compile) or spread over every
        # step (a slower clock, a busier host).
        out["worst_5_share"] = float(per_step[worst].sum() / total) if total > 0 else float("nan")
    return out


def markdown(doc: dict) -> str:
    lines = [
        f"{doc['model']} on {(doc['machine'].get('gpus') or [{}])[0].get('name', doc['device'])}, "
        f"{counted(doc['repeats_run'], 'repeat')}, "
        f"git {str(doc['machine'].get('git_revision'))[:10]}: "
        f"{'every target met' if doc['met'] else 'targets missed'} "
        f"(CV <= {CV_TARGET:.0%}, no repeat over {OFF_TARGET:.0%} from the median)",
        "",
        "| streams | depth | median s | CV | max off | walls s | outliers: what they met |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in doc["configurations"]:
        why = "; ".join(
            f"r{o['repeat']} {o['off']:+.1%}: " + (", ".join(o["region"]["timing_flags"]) or
                                                   _biggest(o["against_median_repeat"]))
            for o in c["outliers"]
        )  # fmt: skip
        walls = " ".join(f"{w:.3f}" for w in c["walls_s"])
        lines.append(f"| {c['streams']} | {c['depth']} | {c['median_s']:.3f} | {c['cv']:.2%} | "
                     f"{c['max_off']:.1%} | {walls} | {why or '-'} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def _biggest(diff: dict) -> str:
    """Where most of the difference went, e.g. 'gpu working +41.0 ms over 520 steps, 12% of it in
    5 steps'."""
    parts = diff["parts_extra_ms"]
    part = max(parts, key=lambda k: abs(parts[k]))
    share = diff.get("worst_5_share")
    where = f", {share:.0%} of it in 5 steps" if share is not None and share == share else ""
    return f"{part} {parts[part]:+.1f} ms over {diff['steps'][0]} steps{where}"
