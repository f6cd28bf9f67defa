"""What nsys costs the host, by option set: one process, the same work timed outside and inside
its capture range (issue #24 item 5: a depth-1 trace describes the profiled engine; by how much?).

    python -m benchmarks.nsys_overhead --out nsys-overhead.json [--model qwen3-0.6b]

For each nsys option set (the project's own, graph- and node-level, and the variants this nsys
offers: no NVTX, no CUDA event trace, ...; only options `nsys profile --help` lists are tried) the
parent starts `nsys profile OPTIONS python -m benchmarks.nsys_overhead --child`. The child, warm,
alternates rounds outside and inside a cudaProfilerStart/Stop range, each round:

- `graph`: the host time of one cudaGraphLaunch of a 300-kernel graph (torch CUDAGraph.replay),
  median of 200;
- `eager`: the host time of one small kernel launch, median of 3000;
- `step`: the engine's decode step at depth 1, one stream (median wall between engine.step calls,
  steady steps), the figure a blocking trace's T_block is read from;
- `step_as_run`: the same with NVTX ranges on every phase and the in-process timeline, as
  run-and-profile's nsys pass runs the engine.

It prints and writes each set's medians outside and inside, and inside / outside. A set is also run
without nsys at all, to show that outside the range nothing is charged.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bubblelab.core.files import write_atomic

BASE = [
    "-s",
    "none",
    "--cpuctxsw=none",
    "--capture-range=cudaProfilerApi",
    "--capture-range-end=stop",
]
# name -> its options; each is tried only where this nsys's `profile --help` names what it uses
VARIANTS: dict[str, list[str]] = {
    "graph": ["-t", "cuda,nvtx", "--cuda-graph-trace=graph"],
    "node": ["-t", "cuda,nvtx", "--cuda-graph-trace=node"],
    "graph, no nvtx": ["-t", "cuda", "--cuda-graph-trace=graph"],
    "graph:host-only": ["-t", "cuda,nvtx", "--cuda-graph-trace=graph:host-only"],
    "graph, no event trace": [
        "-t",
        "cuda,nvtx",
        "--cuda-graph-trace=graph",
        "--cuda-event-trace=false",
    ],
    "graph, cuda-hw": ["-t", "cuda-hw,nvtx", "--cuda-graph-trace=graph"],
    "node, no event trace": [
        "-t",
        "cuda,nvtx",
        "--cuda-graph-trace=node",
        "--cuda-event-trace=false",
    ],
}


def _median_us(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1e6, 2)


def _rounds(args: argparse.Namespace) -> dict:
    import torch

    from bubblelab.core.timeline import Timeline
    from bubblelab.engine import LLM, SamplingParams
    from bubblelab.engine.config import EngineConfig
    from bubblelab.engine.llm_engine import LLMEngine

    x = torch.zeros(256, device="cuda")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(300):
            x.add_(1.0)
    config = EngineConfig(
        model=args.model, device="cuda", depth=1, max_model_len=512, max_num_seqs=4,
        num_kv_blocks=512,
    )  # fmt: skip
    llm = LLM.__new__(LLM)
    llm.engine = LLMEngine(config)
    llm.tokenizer = llm.engine.tokenizer
    # as run-and-profile's nsys pass runs it: NVTX ranges on every phase, the in-process timeline
    as_run = LLM.__new__(LLM)
    as_run.engine = LLMEngine(config, timeline=Timeline(), nvtx=True)
    as_run.tokenizer = as_run.engine.tokenizer
    params = SamplingParams(max_tokens=args.tokens, ignore_eos=True)

    def graph_launch() -> float:
        times = []
        for _ in range(200):
            t0 = time.perf_counter()
            graph.replay()
            times.append(time.perf_counter() - t0)
            torch.cuda.synchronize()
        return _median_us(times)

    def eager_launch() -> float:
        times = []
        for i in range(3000):
            t0 = time.perf_counter()
            x.add_(1.0)
            times.append(time.perf_counter() - t0)
            if i % 100 == 99:
                torch.cuda.synchronize()
        return _median_us(times)

    def step(engine: LLM = llm) -> float:
        stamps: list[float] = []
        engine.generate(
            [list(range(1, 33))], params, on_step=lambda: stamps.append(time.perf_counter())
        )
        gaps = [b - a for a, b in zip(stamps, stamps[1:], strict=False)][5:]
        return _median_us(gaps)

    def step_as_run() -> float:
        return step(as_run)

    probes = {
        "graph": graph_launch,
        "eager": eager_launch,
        "step": step,
        "step_as_run": step_as_run,
    }
    for probe in probes.values():  # warm: allocations, compiles, graphs
        probe()
    out: dict = {"outside": [], "inside": []}
    for _ in range(args.rounds):
        for where in ("outside", "inside"):
            if where == "inside":
                torch.cuda.profiler.start()
            out[where].append({key: probe() for key, probe in probes.items()})
            if where == "inside":
                torch.cuda.synchronize()
                torch.cuda.profiler.stop()
    llm.close()
    as_run.close()
    return out


def _summary(rounds: dict) -> dict:
    row = {}
    for key in rounds["outside"][0]:
        outside = statistics.median(r[key] for r in rounds["outside"])
        inside = statistics.median(r[key] for r in rounds["inside"])
        row[key] = {"outside_us": outside, "inside_us": inside, "ratio": round(inside / outside, 3)}
    return row


def _offered(nsys: str) -> str:
    return subprocess.run([nsys, "profile", "--help"], capture_output=True, text=True).stdout


def _usable(help_text: str, extra: list[str]) -> bool:
    words = [o.split("=")[0] if o.startswith("--") else o for o in extra if o != "-t"]
    words += ["host-only"] * any(":host-only" in o for o in extra)
    return all(w.split(",")[0] in help_text for w in words)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="qwen3-0.6b")
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--only", default="", help="variant names, separated by semicolons")
    args = ap.parse_args()
    if args.child:
        write_atomic(args.child, json.dumps(_rounds(args)))
        return
    wanted = [v.strip() for v in args.only.split(";") if v.strip()] or ["no nsys", *VARIANTS]
    unknown = [v for v in wanted if v != "no nsys" and v not in VARIANTS]
    if unknown:
        known = ", ".join(map(repr, ["no nsys", *VARIANTS]))
        ap.error(f"unknown option sets {unknown}; known: {known}")
    nsys = os.environ.get("NSYS", "nsys")
    help_text = _offered(nsys)
    version = subprocess.run([nsys, "--version"], capture_output=True, text=True).stdout.strip()
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / "nsys-overhead"
    tmp.mkdir(parents=True, exist_ok=True)
    child = [sys.executable, "-m", "benchmarks.nsys_overhead", "--model", args.model,
             "--tokens", str(args.tokens), "--rounds", str(args.rounds)]  # fmt: skip
    result: dict = {"nsys": version, "model": args.model, "sets": {}}
    for name in wanted:
        extra = VARIANTS.get(name, [])
        if name != "no nsys" and not _usable(help_text, extra):
            result["sets"][name] = {"skipped": "this nsys does not offer it"}
            print(f"{name}: skipped (not offered)", flush=True)
            continue
        path = tmp / f"{name.replace(' ', '_').replace(',', '')}.json"
        path.unlink(missing_ok=True)
        cmd = [*child, "--child", str(path)]
        if name != "no nsys":
            cmd = [nsys, "profile", *BASE, *extra, "-o", str(path.with_suffix("")),
                   "--force-overwrite", "true", *cmd]  # fmt: skip
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if not path.is_file():
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            result["sets"][name] = {"failed": " | ".join(tail), "options": extra}
            print(f"{name}: failed: {tail}", flush=True)
            continue
        rounds = json.loads(path.read_text())
        result["sets"][name] = {"options": extra, "summary": _summary(rounds), "rounds": rounds,
                                "wall_s": round(time.perf_counter() - t0, 1)}  # fmt: skip
        print(f"{name}: {json.dumps(result['sets'][name]['summary'])}", flush=True)
        if args.out:
            write_atomic(args.out, json.dumps(result, indent=1))
    if args.out:
        write_atomic(args.out, json.dumps(result, indent=1))
        write_atomic(args.out.parent / "nsys-profile-help.txt", help_text)


if __name__ == "__main__":
    main()
