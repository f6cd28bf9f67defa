"""Measured runs, many per process: `python -m bubblelab.runs.worker PLAN.json`.

A plan names one engine configuration and the runs to make with it, in order. The model is loaded,
its fused ops compiled and its CUDA graphs captured once; each run then sets the engine's depth,
warms up and runs its workload with a fresh timeline, and writes its record (bubblelab.runs.record:
RUN_DIR/<tag>.json.gz, the run's summary, in-process timeline and requests). When profiled, the
plan's `capture` says how: "pass", one cudaProfilerApi capture range over all its runs, each run's
timed region marked by an NVTX range named for its tag (runs.passes cuts the export there);
otherwise each run is its own range (torch.cuda.profiler start/stop around it, after its
warm-up), one report per run with --capture-range-end=repeat. Runs already recorded are skipped,
so a sweep resumes where it stopped; a record is written whole (write_atomic) when its run has
finished, so it is there or not.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from ..core.errors import BubblelabError
from ..core.files import write_atomic
from ..core.timeline import Timeline
from ..engine.config import EngineConfig
from ..engine.llm_engine import LLMEngine
from ..engine.loader import LoadedModel, load_model
from ..engine.start import import_ahead
from ..profiling.nsys import capture_mode
from .driver import RunResult, run_workload
from .record import find_record, timeline_dict, write_record
from .repeats import plan_runs
from .workload import WorkloadSpec


def run_plan(
    plan: dict,
    loaded: LoadedModel | None = None,
    on_run: Callable[[str, dict], None] | None = None,
) -> dict:
    """Make every run of `plan` with one engine: {"engine": EngineConfig kwargs (depth aside),
    "runs": [{"tag", "depth", "workload": WorkloadSpec kwargs}], "out_dir", "profile": bool,
    "gates": optional {"gpu": path, "timing": path}, "process": this worker's number among the
    pass's processes (1: the first), "worker_dir": where its own files go (default out_dir)}.
    Writes each run's record into out_dir, its process in the summary; returns the timings (also
    worker_dir/worker.json).

    Gates let a pass start while the one before it ends (runs.passes): the worker waits for the
    file `gpu` (the previous worker's worker.json) and for that worker's process to be gone before
    it touches the GPU, so the memory it sizes its KV pool from is all there, and for `timing`
    before its first timed run (nothing else runs on the machine any more)."""
    out_dir = Path(plan["out_dir"])
    out_dir.mkdir(parents=True, exist_ok=True)
    profile = bool(plan.get("profile", False))
    gates = plan.get("gates") or {}
    # Where a pass's seconds go (docs/h200-costmodel.md, "The sweep's time"): the wall clock at
    # start and end lets the sweep tell the process's start and nsys's wrap-up from this work.
    started_unix = time.time()
    t0 = time.perf_counter()
    import_ahead(plan["engine"]["device"])  # while the pass before holds the GPU (engine.start)
    import_ahead_s = time.perf_counter() - t0
    wait_gpu_s = wait_for_exit(gates.get("gpu"))
    t0 = time.perf_counter()
    e = plan["engine"]
    # The whole pass in one capture range, each run marked in it: nsys stops the app for seconds
    # at every range's end (2.7-4.5 s on an H200, whatever the range held), so a range per run
    # cost the pass more than its runs did. Refused before the model loads where it cannot hold.
    one_range = plan.get("capture") == "pass"
    if one_range and not (profile and capture_mode(e) == "pass"):
        raise BubblelabError(
            "a pass captured whole is profiled, on one GPU (profiling.nsys.capture_mode)"
        )
    if e.get("tensor_parallel", 1) == 1:  # a tensor-parallel engine loads each rank's shard itself
        loaded = loaded or load_model(
            e["model"], dtype=e["dtype"], device=e["device"], seed=e["seed"],
            attention_backend=e["attention_backend"],
        )  # fmt: skip
    load_s = time.perf_counter() - t0
    first = plan["runs"][0]["depth"] if plan["runs"] else 1
    engine = LLMEngine(EngineConfig(**e, depth=first), loaded, timeline=Timeline(), nvtx=profile)
    runs_s: dict[str, float] = {}
    parts: dict[str, dict[str, float]] = {}
    setup_s = time.perf_counter() - t0
    timings: dict[str, object] = {
        "setup_s": setup_s, "load_s": load_s, "engine_s": setup_s - load_s,  # compile + capture
        "runs_s": runs_s, "run_parts_s": parts, "started_unix": started_unix,
        "import_ahead_s": import_ahead_s, "wait_gpu_s": wait_gpu_s, "pid": os.getpid(),
        "engine_parts_s": dict(engine.runner.graphs.parts_s),
        "compile_counters": compile_counters(),
    }  # fmt: skip
    try:
        timings["wait_timing_s"] = wait_for(gates.get("timing"))
        timings["runs_started_unix"] = time.time()
        if one_range:
            timings["capture_open_s"] = _profiler(torch.cuda.profiler.start)
        for run in plan_runs(plan):  # each configuration's repeats until known (runs.repeats)
            if find_record(out_dir, run["tag"]) is not None:  # finished before a resume
                continue
            started, started_at = time.perf_counter(), time.strftime("%Y-%m-%d %H:%M:%S")
            _say(profile, f"run {run['tag']} begins")
            engine.set_depth(run["depth"])
            engine.timeline = engine.phases.timeline = Timeline()
            result = run_workload(
                engine,
                WorkloadSpec(**run["workload"]),
                profile=profile,
                mark=run["tag"] if one_range else None,
            )
            record = result_record(result)
            record["summary"]["started_at"] = started_at
            record["summary"]["process"] = int(plan.get("process", 1))  # runs.repeats pairs by it
            write_record(out_dir, run["tag"], record)
            runs_s[run["tag"]] = time.perf_counter() - started
            parts[run["tag"]] = _parts(runs_s[run["tag"]], result.summary)
            _say(profile, f"run {run['tag']} ends")
            if on_run is not None:
                on_run(run["tag"], record["summary"])
        if one_range:
            timings["capture_close_s"] = _profiler(torch.cuda.profiler.stop)
    finally:
        engine.close()
    timings["total_s"] = time.perf_counter() - t0
    timings["ended_unix"] = time.time()
    home = Path(plan.get("worker_dir", out_dir))
    write_atomic(home / "worker.json", json.dumps(timings, indent=1))
    return timings


def compile_counters() -> dict[str, int]:
    """This process's torch.compile so far: graphs compiled, and Inductor's and AOTAutograd's cache
    hits and misses (a worker whose compile is slow though an earlier one filled the caches says
    which it missed)."""
    from torch._dynamo.utils import counters

    keep = {"stats": ("unique_graphs",), "inductor": ("fxgraph_cache",), "aot_autograd": ("cache",)}
    return {
        f"{group}.{key}": int(n)
        for group, words in keep.items()
        for key, n in counters[group].items()
        if any(w in key for w in words)
    }


def wait_for(gate: str | None, poll_s: float = 0.05) -> float:
    """Wait until the file `gate` exists (None: no wait); returns the seconds waited."""
    t0 = time.perf_counter()
    while gate is not None and not Path(gate).exists():
        time.sleep(poll_s)
    return time.perf_counter() - t0


def wait_for_exit(gate: str | None) -> float:
    """Wait for a worker's worker.json, then for its process (the pid it names) to be gone."""
    t0 = time.perf_counter()
    wait_for(gate)
    pid = json.loads(Path(gate).read_text()).get("pid") if gate is not None else None
    while pid is not None and _alive(pid):
        time.sleep(0.05)
    return time.perf_counter() - t0


def _alive(pid: int) -> bool:
    """The process runs (an exited one its parent has not reaped yet holds nothing: gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


def _profiler(call: Callable[[], None]) -> float:
    """Open or close the capture range; returns the seconds it took (nsys's, not the runs')."""
    t0 = time.perf_counter()
    call()
    return time.perf_counter() - t0


def _parts(run_s: float, summary: dict) -> dict[str, float]:
    """A run's seconds by part: warm-up, the profiler's range opening and closing, the workload,
    and the rest (the record: its timeline as JSON, written)."""
    known = {k: float(summary.get(f"{k}_s") or 0.0) for k in ("warmup", "profiler")}
    known["workload"] = float(summary.get("wall_s") or 0.0)
    return {**known, "record": run_s - sum(known.values())}


def _say(profile: bool, what: str) -> None:
    """Under nsys, a time-stamped line on stdout, which nsys's own output shares: the nsys log
    (runs/nsys/nsys.log) then shows when nsys wrote each report against the runs."""
    if profile:
        print(f"[worker {time.time():.3f}] {what}", flush=True)


def result_record(result: RunResult) -> dict:
    """The run's summary, rank 0's timeline and its requests; under tensor parallelism `ranks`
    holds ranks 1..N-1's timelines."""
    record: dict = {
        "summary": {**result.summary, **machine_facts()},  # once a process: nvidia-smi is slow
        "timeline": timeline_dict(result.timeline),
        "requests": [
            {
                "request": i,
                "prompt_len": len(r.prompt_ids),
                "output_len": len(result.outputs[r.request_id]),
                "max_tokens": r.params.max_tokens,
                "constrained": r.params.constraint is not None,
                "arrival_s": r.arrival_s,
            }
            for i, r in enumerate(result.requests)
        ],
    }
    if result.rank_timelines:
        record["ranks"] = [timeline_dict(t) for t in result.rank_timelines]
    return record


@functools.cache
def machine_facts() -> dict:
    facts: dict[str, str | None] = {"torch": str(torch.__version__), "driver": None}
    if torch.cuda.is_available():
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=30,
            )
            facts["driver"] = out.stdout.strip().splitlines()[0] if out.returncode == 0 else None
        except (OSError, subprocess.TimeoutExpired, IndexError):
            pass
    return facts


def main(argv: list[str]) -> None:
    run_plan(json.loads(Path(argv[0]).read_text()))


if __name__ == "__main__":
    main(sys.argv[1:])
