"""Run-to-run variance of a configuration's wall time (issue #25 item 1), in one process.

One engine (one model load, one graph capture), then repeats of the same workload (the same seed:
the same requests, so the same steps) at every stream count and depth, interleaved: repeat-major,
stream counts in turn, the depth order alternating between repeats. Per configuration: every
repeat's wall, the median, the coefficient of variation (CV), and each repeat more than 3% from the
median with what its timed region met (runs.region: compiles, captures, new shapes, collections,
allocator growth, clocks, slow steps) and what differed in its timeline from the median repeat's,
step by step (profiling's per-step table: which steps, which phase, host or GPU). Targets: CV <= 1%
at every stream count, no repeat over 3% from the median.

    python -m benchmarks.variance --model qwen3-0.6b --streams 1,8,32,96,128 --repeats 7 --out $OUT
    python -m benchmarks.variance --device cpu --model tiny-qwen3 --streams 1,4 --repeats 3 \\
        --output-len 8 --decode-steps 40 --out /tmp/var

Writes OUT/variance.json (everything), OUT/variance.md (the table) and, with --keep-records, each
run's record (summary and timeline) under OUT/runs/. --budget-s: no repeat starts after it (the
JSON says how many ran).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np

from bubblelab.core.files import write_atomic
from bubblelab.core.timeline import Timeline
from bubblelab.engine.config import EngineConfig, default_dtype
from bubblelab.engine.llm_engine import LLMEngine
from bubblelab.engine.loader import load_model
from bubblelab.profiling.analysis import per_step_from_timeline
from bubblelab.runs.driver import RunResult, run_workload
from bubblelab.runs.machine import machine_facts
from bubblelab.runs.worker import result_record
from bubblelab.runs.workload import WorkloadSpec

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


def main() -> None:
    a = parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    dtype = a.dtype or default_dtype(a.device)
    loaded = load_model(a.model, dtype=dtype, device=a.device, seed=0,
                        attention_backend=a.attention_backend)  # fmt: skip
    config = EngineConfig(model=a.model, device=a.device, dtype=dtype, depth=1,
                          max_num_seqs=max(8, *a.streams), max_model_len=a.max_model_len,
                          attention_backend=a.attention_backend)  # fmt: skip
    engine = LLMEngine(config, loaded, timeline=Timeline())
    setup_s = time.perf_counter() - t0
    print(f"{a.model} on {a.device}: loaded, compiled and captured in {setup_s:.1f} s", flush=True)
    runs: dict[tuple[int, int], list[RunResult]] = {}
    repeats_run = 0
    for r in range(a.repeats):
        if r and time.perf_counter() - t0 > a.budget_s:
            print(f"budget of {a.budget_s:.0f} s spent: {r} repeats of {a.repeats}", flush=True)
            break
        for s in a.streams:
            for depth in a.depths if r % 2 == 0 else a.depths[::-1]:
                engine.set_depth(depth)
                engine.timeline = engine.phases.timeline = Timeline()
                result = run_workload(engine, workload(a, s))
                runs.setdefault((s, depth), []).append(result)
                w = result.summary
                print(f"r{r} s{s} d{depth}: {w['wall_s']:.3f} s {' '.join(w['timing_flags'])}",
                      flush=True)  # fmt: skip
                if a.keep_records:
                    write_atomic(out / "runs" / f"s{s}-d{depth}-r{r}.json",
                                 json.dumps(result_record(result)))  # fmt: skip
        repeats_run = r + 1
    engine.close()
    doc = {
        "command": a.command, "model": a.model, "device": a.device, "dtype": dtype,
        "attention_backend": loaded.model.attn_backend.name,
        "compiled": loaded.model.compile_enabled, "machine": machine_facts(),
        "repeats_asked": a.repeats, "repeats_run": repeats_run, "setup_s": setup_s,
        "wall_s": time.perf_counter() - t0, "targets": {"cv": CV_TARGET, "off": OFF_TARGET},
        "configurations": [configuration(s, d, rs) for (s, d), rs in sorted(runs.items())],
    }  # fmt: skip
    doc["met"] = all(c["met"] for c in doc["configurations"])
    write_atomic(out / "variance.json", json.dumps(doc, indent=1))
    table = markdown(doc)
    write_atomic(out / "variance.md", table)
    print(table)


def workload(a: argparse.Namespace, streams: int) -> WorkloadSpec:
    """The same requests every repeat (one seed): a repeat differs from another only by noise."""
    per_stream = max(2, math.ceil(a.decode_steps / a.output_len))
    return WorkloadSpec(
        streams=streams, requests=streams * per_stream, output_len_mean=a.output_len,
        prompt_len=a.prompt_len, seed=a.seed,
    )  # fmt: skip


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
        f"{doc['repeats_run']} repeats, git {str(doc['machine'].get('git_revision'))[:10]}: "
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


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default="qwen3-0.6b")
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default=None)
    p.add_argument("--attention-backend", default="auto")
    p.add_argument("--streams", default="1,8,32,96,128")
    p.add_argument("--depths", default="1,2")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--output-len", type=float, default=50.0, help="mean output length L")
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument(
        "--decode-steps",
        type=int,
        default=300,
        help="about this many decode steps a run: requests = streams x ceil(this / L)",
    )
    p.add_argument("--max-model-len", type=int, default=512)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--budget-s", type=float, default=260.0, help="no repeat starts after this")
    p.add_argument("--keep-records", action="store_true", help="each run's record in OUT/runs/")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    a.command = "python -m benchmarks.variance " + " ".join(
        f"--{k.replace('_', '-')} {v}" for k, v in vars(a).items() if v not in (None, False)
    )
    a.streams = [int(x) for x in a.streams.split(",")]
    a.depths = [int(x) for x in a.depths.split(",")]
    return a


if __name__ == "__main__":
    main()
