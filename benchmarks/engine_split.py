"""Where the write-up workload's wall goes in bubblelab, at depth 1 and depth 2: the toolkit on its
own engine.

One process loads the model once (seeded random weights), builds the depth-1 and depth-2 engines
compare_nanovllm builds, and runs the nano-vllm write-up's workload (128 prompts of 20-80 tokens,
64 tokens each, temperature 0.6, ignore_eos, all at once):

1. a warm-up round per depth, then --rounds rounds, depths interleaved, unprofiled, each with the
   in-process timeline: the wall and its split into time before the first forward, prefill steps,
   decode steps (forward, sampling, bubble) and time after the last step;
2. one more round per depth inside a CUDA profiler range, when run under nsys (the default: this
   script re-runs itself under `nsys profile`), each its own report, ingested into a catalog and
   read with the kernel view: GPU time per step kind and class of work (GEMM, attention, sampling,
   elementwise), the top kernels and the per-step table.

Writes split.json and split.md to --out (the catalog and the exports stay there too).
`--summarise DIR` writes them again from what a run left in DIR (its rounds.json and nsys exports),
on any machine: the GPU machine returns only so many files.

    python -m benchmarks.engine_split --out $OUT                        # GPU, qwen3-4b: ~2 minutes
    python -m benchmarks.engine_split --device cpu --preset tiny-qwen3 --no-nsys --out /tmp/split
    python -m benchmarks.engine_split --summarise DIR
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import pandas as pd
import torch

from benchmarks import peer_bubblelab
from benchmarks.peer_workloads import Case, writeup_case
from bubblelab.core.files import write_atomic
from bubblelab.core.timeline import Timeline
from bubblelab.engine.loader import load_model
from bubblelab.profiling import kernels
from bubblelab.profiling.analysis import per_step, per_step_from_timeline
from bubblelab.profiling.catalog import connect
from bubblelab.profiling.ingest import ingest
from bubblelab.profiling.nsys import profile_ranges

DEPTHS = (1, 2)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--out", type=Path)
    ap.add_argument("--summarise", type=Path, help="write the split again from this run's folder")
    ap.add_argument("--preset", default="qwen3-4b", help="model shapes (seeded random weights)")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--attention-backend", default="auto")
    ap.add_argument("--rounds", type=int, default=5, help="unprofiled rounds per depth")
    ap.add_argument("--prompts", type=int, default=None, help="fewer prompts (dry runs)")
    ap.add_argument("--no-nsys", action="store_true", help="unprofiled rounds only")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if (a.out is None) == (a.summarise is None):
        ap.error("give --out (a run) or --summarise DIR (a finished one)")
    return a


def timeline_split(timeline: Timeline, depth: int, t0_ns: int, wall_s: float) -> dict:
    """One round's wall in parts (ms): before the first forward, each step kind's periods
    (forward + sampling + bubble), the last step's own GPU time and after it until the host
    returned."""
    steps = per_step_from_timeline(timeline, "round", depth)
    dev = timeline.device_frame()
    first, last = int(dev.start_ns.min()), int(dev.end_ns.max())
    out: dict = {
        "wall_ms": 1e3 * wall_s,
        "before_first_forward_ms": (first - t0_ns) / 1e6,
        # the last step has no period (no next step): its forward start to the last GPU end
        "last_step_ms": (last - int(dev[dev.phase == "forward"].start_ns.max())) / 1e6,
        "after_last_gpu_ms": 1e3 * wall_s - (last - t0_ns) / 1e6,
    }
    for kind, sums in kind_sums(steps).items():
        rows = steps[steps.kind == kind]
        out[kind] = {**sums, "batch_size_max": int(rows.batch_size.max())}
    return out


def kind_sums(steps: pd.DataFrame) -> dict[str, dict]:
    """A per-step table's steps, forward, sampling, period and bubble summed per step kind (the
    last step has no period: its bubble and period are left out)."""
    out = {}
    for kind, rows in steps.groupby("kind"):
        timed = rows.dropna(subset=["period_ms"])
        out[str(kind)] = {
            "steps": len(rows),
            "period_ms": float(timed.period_ms.sum()),
            "forward_ms": float(rows.forward_ms.sum()),
            "sampling_ms": float(rows.sampling_ms.sum()),
            "bubble_ms": float(timed.bubble_ms.sum()),
        }
    return out


def run_round(engine, case: Case, depth: int) -> dict:
    timeline = Timeline(depth=depth)
    engine.timeline = engine.phases.timeline = timeline
    engine.streams.calibrate()  # a fresh device-clock reference for this round's timeline
    result = peer_bubblelab.run_case(engine, case)
    # where run_case's wall began, on the timeline's clock: it returns right after timing the end
    t0_ns = time.perf_counter_ns() - round(1e9 * result["wall_s"])
    engine.timeline = engine.phases.timeline = None
    return timeline_split(timeline, depth, t0_ns, result["wall_s"])


def child(a: argparse.Namespace) -> None:
    """The measuring process: unprofiled rounds, then one profiled round per depth."""
    dtype = "bf16" if a.device == "cuda" else "fp32"  # as compare_nanovllm
    loaded = load_model(
        a.preset, dtype=dtype, device=a.device, seed=0, attention_backend=a.attention_backend
    )
    case = writeup_case(loaded.config.vocab_size, seed=0)
    if a.prompts:
        case = Case(case.part, case.name, a.prompts, case.prompts[: a.prompts],
                    case.max_tokens[: a.prompts])  # fmt: skip
    engines = peer_bubblelab.build_engines(
        loaded, a.preset, a.device, dtype, a.attention_backend, [case], nvtx=not a.no_nsys
    )
    rounds: dict[int, list[dict]] = {d: [] for d in DEPTHS}
    try:
        for depth in DEPTHS:  # warm-up: every graph and kernel of this workload built
            peer_bubblelab.run_case(engines[depth], case)
        for r in range(a.rounds):
            for depth in DEPTHS if r % 2 == 0 else DEPTHS[::-1]:
                rounds[depth].append(run_round(engines[depth], case, depth))
                print(f"round {r} depth {depth}: {rounds[depth][-1]['wall_ms']:.1f} ms", flush=True)
        if not a.no_nsys:
            for depth in DEPTHS:
                torch.cuda.profiler.start()
                peer_bubblelab.run_case(engines[depth], case)
                torch.cuda.profiler.stop()
    finally:
        peer_bubblelab.close_engines(engines)
    facts = {
        "preset": a.preset,
        "device": torch.cuda.get_device_name() if a.device == "cuda" else "cpu",
        "torch": torch.__version__,
        "attention_backend": type(loaded.model.attn_backend).__name__,
        "prompts": len(case.prompts),
        "prompt_tokens": sum(len(p) for p in case.prompts),
        "max_tokens": case.max_tokens[0],
        "rounds": rounds,
    }
    write_atomic(a.out / "rounds.json", json.dumps(facts, indent=1))


def median_split(rounds: list[dict]) -> dict:
    """Per part, the median over rounds (nested parts too)."""
    out: dict = {}
    for key, value in rounds[0].items():
        if isinstance(value, dict):
            out[key] = median_split([r[key] for r in rounds])
        else:
            values = [r[key] for r in rounds]
            out[key] = statistics.median(values)
            if key == "wall_ms":
                out["wall_ms_range"] = [min(values), max(values)]
    return out


def trace_split(export: Path, catalog: Path) -> dict:
    """One profiled round read back from its nsys export with the kernel view."""
    con = connect(catalog)
    run_id = ingest(export, None, con=con)
    per_kind = kind_sums(per_step(con, run_id))
    view = kernels.kernel_view(con, run_id, top=12)
    con.close()
    return {
        "trace": export.name,
        "steps": per_kind,
        "kernel_classes": view["kernel_classes"],
        "top_kernels": view["top_kernels"],
        "run_split": view["run_split"],
    }


def main(argv: list[str] | None = None) -> None:
    a = parse_args(argv)
    if a.summarise is not None:
        write_split(a.summarise, sorted(a.summarise.glob("engine-split.*.sqlite")))
        return
    a.out.mkdir(parents=True, exist_ok=True)
    if a.child or a.no_nsys:
        child(a)
        if a.child:
            return
        exports: list[Path] = []
    else:
        args = list(argv if argv is not None else sys.argv[1:])
        exports = profile_ranges(
            a.out / "engine-split",
            [sys.executable, "-m", "benchmarks.engine_split", *args, "--child"],
            log=a.out / "nsys.log",
        )
    write_split(a.out, exports)


def write_split(out: Path, exports: list[Path]) -> None:
    """split.json and split.md from out's rounds.json and the profiled rounds' exports, in depth
    order; the markdown printed too."""
    facts = json.loads((out / "rounds.json").read_text())
    facts["unprofiled"] = {d: median_split(r) for d, r in facts.pop("rounds").items()}
    facts["profiled"] = {
        str(depth): trace_split(export, out / "catalog.duckdb")
        for depth, export in zip(DEPTHS, exports, strict=False)
    }
    write_atomic(out / "split.json", json.dumps(facts, indent=1))
    write_atomic(out / "split.md", markdown(facts))
    print((out / "split.md").read_text())


def markdown(facts: dict) -> str:
    lines = [
        f"# Where the write-up workload's wall goes: {facts['preset']} on {facts['device']}",
        "",
        f"{facts['prompts']} prompts ({facts['prompt_tokens']} tokens), "
        f"{facts['max_tokens']} tokens each; attention {facts['attention_backend']}; "
        f"torch {facts['torch']}.",
        "",
        "## Unprofiled (in-process timeline, median of rounds), ms",
        "",
        "| depth | wall | before 1st forward | prefill steps | prefill fwd | decode steps | "
        "decode fwd | decode sampling | decode bubble | last step | after last |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for depth, s in facts["unprofiled"].items():
        p, d = s.get("prefill", {}), s.get("decode", {})
        lines.append(
            f"| {depth} | {s['wall_ms']:.1f} ({s['wall_ms_range'][0]:.1f}-"
            f"{s['wall_ms_range'][1]:.1f}) | {s['before_first_forward_ms']:.1f} | "
            f"{p.get('steps', 0):.0f} ({p.get('period_ms', 0):.1f}) | "
            f"{p.get('forward_ms', 0):.1f} | "
            f"{d.get('steps', 0):.0f} ({d.get('period_ms', 0):.1f}) | "
            f"{d.get('forward_ms', 0):.1f} | "
            f"{d.get('sampling_ms', 0):.1f} | {d.get('bubble_ms', 0):.1f} | "
            f"{s['last_step_ms']:.1f} | {s['after_last_gpu_ms']:.1f} |"
        )
    for depth, t in facts["profiled"].items():
        lines += [
            "",
            f"## Depth {depth} under nsys: GPU time by step kind and class of work",
            "",
            "| step kind | class | ops | total ms | ms / step | share |",
            "|---|---|---:|---:|---:|---:|",
        ]
        lines += [
            f"| {r['kind']} | {r['class']} | {r['ops']} | {r['total_ms']:.2f} | "
            f"{(r['per_step_ms'] or 0):.3f} | {100 * r['share']:.1f}% |"
            for r in t["kernel_classes"]
        ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
