"""What becomes of a traced job's nsys export (tools/traces/make_foreign_traces.py): its steady
steps cut out (profiling.trim.trim_foreign) and gzipped small enough to come back from the GPU
machine, its analysis digested, and its traces/index.json entry."""

from __future__ import annotations

import gzip
import hashlib
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tools.traces.make_foreign_traces import Job

STEP_RANGE = r"^LLMEngine\.step$"
MAX_GZ_BYTES = 12 << 20  # files come back at up to 16 MiB each


def finish(trace: str, job: Job, info: dict, work: Path, out: Path, keep: int) -> tuple[dict, dict]:
    """Cut the job's export to this trace's steps, gzip it into OUT, and analyse it; returns the
    trace's index entry and the analysis digest."""
    from bubblelab.profiling.steps import StepOptions

    export = work / f"{job.name}.sqlite"
    options = StepOptions(step_range=STEP_RANGE) if trace.endswith("-nvtx") else StepOptions()
    first, last = step_window(export, options, keep, raw_half=trace == "nanovllm-raw")
    run = info.get("runs", {}).get("nvtx" if trace.endswith("-nvtx") else "raw", {})
    # two processes (nano-vllm at TP 2): cut by rank 0's steps, both ranks' rows kept
    gz = trim_and_gzip(export, out / f"{trace}.sqlite", first, last, options, keep)
    entry = {
        **index_entry(job, info, run),
        "steps": [first, last],
        **({"step_range": STEP_RANGE} if trace.endswith("-nvtx") else {}),
        **({"tensor_parallel": 2} if trace == "nanovllm-tp2" else {}),
    }
    return entry, digest(gz, options, entry.get("mean_generated_len"))


def index_entry(job: Job, info: dict, run: dict) -> dict:
    """What index.json says of a trace: the engine, its version, model and workload, what the run
    generated (`run`: its wall_s and generated_tokens)."""
    entry = {
        "engine": job.engine,
        "engine_version": info.get("engine_version")
        or source_version(Path(job.job.get("source", "."))),
        "model": info.get("model", job.job.get("preset") or "see workload"),
        "workload": info.get("workload"),
        "command": info.get("command"),
        "requests": info.get("requests"),
        "mean_generated_len": info.get("mean_generated_len"),
        "generated_tokens": run.get("generated_tokens"),
        "wall_s": run.get("wall_s"),
        "torch": info.get("torch"),
    }
    if "ckpt" in job.job:  # nano-vllm and the fork load a checkpoint of seeded random weights
        entry["model"] = (
            f"{Path(job.job['ckpt']).name.removeprefix('ckpt-')} (seeded random weights)"
        )
    return entry


def step_window(export: Path, options, keep: int, raw_half: bool = False) -> tuple[int, int]:
    """The steps to keep: the middle `keep` of the run's steps; for the raw half of the nano-vllm
    capture, the steps before the 0.3 s idle between its two generates."""
    from bubblelab.profiling import analysis
    from bubblelab.profiling.catalog import connect
    from bubblelab.profiling.ingest import ingest_trace

    con = connect(None)  # several processes: the steps of the one with the most GPU work
    steps = analysis.per_step(con, ingest_trace(export, None, {}, steps=options, con=con)[0])
    last = len(steps) - 1
    if raw_half:
        idle = steps[steps["period_ms"] > 250]
        last = int(idle["step"].iloc[0]) if len(idle) else last
    first = max(0, (last + 1 - keep) // 2)
    return first, min(last, first + keep - 1)


def trim_and_gzip(export: Path, plain: Path, first: int, last: int, options, keep: int) -> Path:
    """profiling.trim.trim_foreign, gzipped; fewer steps while it is too big to come back."""
    from bubblelab.profiling.trim import trim_foreign

    while True:
        trim_foreign(export, plain, first, last, options)
        gz = gzip_file(plain, plain.with_name(plain.name + ".gz"))
        plain.unlink()
        if gz.stat().st_size <= MAX_GZ_BYTES or last - first < 20:
            return gz
        middle = (first + last) // 2
        first, last = middle - (last - first) // 4, middle + (last - first) // 4


def gzip_file(src: Path, gz: Path) -> Path:
    with src.open("rb") as plain, gzip.open(gz, "wb", compresslevel=9) as packed:
        shutil.copyfileobj(plain, packed)
    return gz


def digest(trace: Path, options, output_len: float | None) -> dict:
    """What `bubblelab analyze --json` says about the trace, the pipelining prediction included."""
    from bubblelab.runs.analysis import analyze_traces

    reports = analyze_traces([trace], steps=options, output_len=output_len)["runs"]
    if len(reports) > 1:  # one process a GPU: a report per rank
        return {"ranks": reports, "bytes": trace.stat().st_size}
    return {**reports[0], "bytes": trace.stat().st_size}


def source_version(source: Path) -> str | None:
    """The commit tools/gpu_machine/stage_nanovllm.sh recorded, or the git commit of a checkout,
    else a hash of its Python files."""
    if (source / "COMMIT").is_file():
        return (source / "COMMIT").read_text().strip()
    head = subprocess.run(
        ["git", "-C", str(source), "rev-parse", "HEAD"], capture_output=True, text=True
    )
    if head.returncode == 0:
        return head.stdout.strip()
    files = sorted(source.glob("nanovllm/**/*.py"))
    if not files:
        return None
    digest_ = hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest()[:12]
    return f"files sha256 {digest_}"
