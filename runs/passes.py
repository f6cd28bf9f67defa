"""A sweep's passes, each one worker (bubblelab.runs.worker) making its runs with one engine.

On the GPU each pass is its own process, under nsys when it profiles, and a pass starts before the
one before it has ended: its worker starts its interpreter and imports at once, touches the GPU
once the previous worker has let go of it (that worker's worker.json is written) and times its
first run once the previous pass has ended whole (nsys's last reports written, exported and
compressed: the file `ended` in its run directory). The next pass's start-up, model load, compile
and graph capture so hide the previous one's wrap-up, and no timed run shares the machine with
another pass. On the CPU (the demo, the tests) a pass runs in this process, after the others.

The unprofiled pass may be several worker processes, one after another, each gated on the one
before as a pass is (runs.repeats spreads each configuration's pairs over them): they write their
records into the pass's directory, and a later process keeps its own files (plan, worker.json, log,
gate) in process.<n>/ there (worker_dir).

An nsys pass on one GPU is one capture range with each run's timed region marked in it (runs.worker;
nsys stops the app for seconds at every range's end), its export cut into one per run after
(split_pass); a tensor-parallel pass keeps a range per run (profiling.nsys.capture_mode). It keeps
what the analysis reads: each run's SQLite export, less the kernel columns no query reads, gzipped
(ingest reads it so); nsys's reports, which hold everything (pass.nsys-rep for a pass captured
whole, run.<n>.nsys-rep otherwise), go unless asked for (keep_reports). Every part is timed
(`finish`).
"""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import BubblelabError
from ..core.files import map_files, write_atomic
from ..profiling.nsys import Ranges, finish_ranges, start_ranges
from ..profiling.trim import slim_kernels, split_runs
from .record import find_record, load_record

ENDED = "ended"  # in a pass's run directory once the pass has ended whole (a gate for the next)
PASS_REPORT = "pass.nsys-rep"  # nsys's report of a pass captured whole (kept with keep_reports)
LOG = "worker.log"  # what a pass's worker printed (nsys.log under nsys)


@dataclass
class Pass:
    """A pass (or one of its worker processes) under way in its own process."""

    name: str  # its timings' key: the pass's name, "<pass>.<n>" for its n-th process
    run_dir: Path  # the pass's directory, where the records go
    left: list[str]  # the runs it makes (the others were recorded before a resume)
    process: int = 1
    launched: float = field(default_factory=time.time)
    started: float = field(default_factory=time.perf_counter)
    proc: subprocess.Popen | None = None
    ranges: Ranges | None = None
    one_range: bool = False  # the pass is one capture range, its runs marked (runs.worker)

    @property
    def home(self) -> Path:
        return worker_dir(self.run_dir, self.process)


def worker_dir(run_dir: Path, process: int = 1) -> Path:
    """Where a pass's worker process keeps its own files (plan.json, worker.json, worker.log and
    the `ended` gate): the pass's directory for its first process, process.<n>/ in it for a later
    one, so that its *.json never reads as a run's record."""
    return run_dir if process == 1 else run_dir / f"process.{process}"


def in_process(plan: dict) -> bool:
    """A CPU pass without a profiler runs in this process (the demo, the tests)."""
    return plan["engine"]["device"] == "cpu" and not plan["profile"]


def run_here(plan: dict, left: list[str], on_run: Callable | None) -> dict[str, float]:
    """Run a pass in this process; returns its timings."""
    # The engine's imports (torch, Triton, transformers) only where a pass runs here: on the GPU
    # the sweep's own process only launches workers, and its start-up is on the sweep's clock.
    from .worker import run_plan

    started, launched = time.perf_counter(), time.time()
    run_dir = Path(plan["out_dir"])
    write_atomic(run_dir / "plan.json", json.dumps(plan, indent=1))
    run_plan(plan, on_run=on_run)
    return _timings(run_dir, launched, started)


def launch(
    name: str, plan: dict, out_dir: Path, left: list[str], after: Pass | None, process: int = 1
) -> Pass:
    """Start a pass's worker (its `process`-th, under nsys when it profiles), gated on the pass or
    process `after` if any."""
    run_dir = Path(plan["out_dir"])
    p = Pass(name if process == 1 else f"{name}.{process}", run_dir, left, process=process,
             one_range=plan.get("capture") == "pass")  # fmt: skip
    p.home.mkdir(parents=True, exist_ok=True)
    for stale in (ENDED, "worker.json"):  # the gates of this pass are this run's, not a resume's
        (p.home / stale).unlink(missing_ok=True)
    plan = {**plan, "process": process, "worker_dir": str(p.home)}
    if after is not None:
        plan["gates"] = {"gpu": str(after.home / "worker.json"), "timing": str(after.home / ENDED)}
    plan_path = write_atomic(p.home / "plan.json", json.dumps(plan, indent=1))
    argv = [sys.executable, "-m", "bubblelab.runs.worker", str(plan_path)]
    if plan["profile"]:
        graph_trace = plan.get("cuda_graph_trace", "node")  # a plan from before the option
        p.ranges = start_ranges(out_dir / "traces" / "run", argv, graph_trace=graph_trace)
    else:
        with (p.home / LOG).open("w") as log:
            p.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    return p


def finish(p: Pass, on_run: Callable | None, keep_reports: bool = False) -> dict[str, float]:
    """Wait for the pass to end; under nsys export what nsys left, drop the .nsys-rep files (unless
    keep_reports) and gzip the exports; then open the gate for the next pass. Returns its timings,
    each part timed."""
    out: dict[str, float] = {}
    if p.ranges is not None:
        exports = finish_ranges(p.ranges, log=p.run_dir / "nsys.log")
        t = time.perf_counter()
        if p.one_range:
            exports = split_pass(exports, p.left)
            out["split_s"] = time.perf_counter() - t
        reports = [e.with_suffix(".nsys-rep") for e in exports]
        if p.one_range:  # one report for the whole pass (split_pass)
            reports = [p.ranges.out_base.with_name(PASS_REPORT)]
        out["reports_bytes"] = sum(r.stat().st_size for r in reports if r.is_file())
        if not keep_reports:
            for report in reports:
                report.unlink(missing_ok=True)
        out["exports_bytes"] = sum(e.stat().st_size for e in exports)
        out["traces_bytes"] = sum(e.stat().st_size for e in compress(exports))
        out["compress_s"] = time.perf_counter() - t
    else:
        assert p.proc is not None
        if p.proc.wait() != 0:
            tail = (p.home / LOG).read_text(errors="replace").strip().splitlines()[-3:]
            raise BubblelabError(f"the sweep's worker failed: {' | '.join(tail)}")
    (p.home / ENDED).touch()
    timings = {**_timings(p.home, p.launched, p.started), **out}
    if on_run is not None:
        for tag in p.left:
            if (record := find_record(p.run_dir, tag)) is None:  # runs.repeats may skip it
                continue
            summary = load_record(record)["summary"]
            if summary.get("process", 1) == p.process:  # another process's run: told there
                on_run(tag, summary)
    return timings


def stop(passes: list[Pass]) -> None:
    """End the passes still running (a pass before them failed or the sweep was interrupted)."""
    for p in passes:
        proc = p.proc if p.proc is not None else p.ranges.proc if p.ranges is not None else None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


def split_pass(exports: list[Path], tags: list[str]) -> list[Path]:
    """The one export of a pass captured whole, cut into one per run (run.<n>.sqlite, in the order
    the runs ran, as a range per run leaves them: runs.assemble pairs them by position). The whole
    export goes; its report, the whole pass, becomes traces/pass.nsys-rep (PASS_REPORT)."""
    if len(exports) != 1:
        raise BubblelabError(f"nsys wrote {len(exports)} reports for a pass captured whole")
    report = exports[0].with_suffix(".nsys-rep")  # run.nsys-rep: nsys numbers only several
    whole = exports[0].rename(exports[0].with_name("pass.sqlite"))
    targets = [whole.with_name(f"run.{n}.sqlite") for n in range(1, len(tags) + 1)]
    cuts = split_runs(whole, tags, targets)
    whole.unlink()
    if report.is_file():
        report.replace(report.with_name(PASS_REPORT))
    return cuts


def compress(exports: list[Path]) -> list[Path]:
    """Each export without the kernel columns no query reads (profiling.trim.slim_kernels), gzipped
    beside it (the plain file removed), in parallel: ingest reads .gz. Slimmed and at level 6 a
    trace is ~40% smaller than whole at level 1, the analysis of it the same."""

    def one(path: Path) -> Path:
        slim_kernels(path)
        target = path.with_name(path.name + ".gz")
        partial = target.with_name(target.name + ".partial")  # a .gz there is whole
        with path.open("rb") as src, gzip.open(partial, "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        partial.replace(target)
        path.unlink()
        return target

    return map_files(one, exports)


def _timings(run_dir: Path, launched: float, started: float) -> dict[str, float]:
    """The pass's wall clock, and the parts outside its worker's own work: `start_s` from launch to
    the worker's first line (the interpreter, its imports, nsys starting up) and `finish_s` from the
    worker's last line to the pass's end (under nsys: its last reports, their export and
    compression, compress_s of it)."""
    ended = time.time()
    out = {"wall_s": time.perf_counter() - started}
    worker = run_dir / "worker.json"
    if worker.is_file():
        w = json.loads(worker.read_text())
        if "started_unix" in w and "ended_unix" in w:
            out |= {"start_s": w["started_unix"] - launched, "finish_s": ended - w["ended_unix"]}
    return out
