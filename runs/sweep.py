"""run-and-profile: a sweep of (streams, depth) runs, measured unprofiled and under nsys.

Two passes over the same configurations, each one process (bubblelab.runs.worker) that loads the
model, compiles and captures its CUDA graphs once:

- unprofiled: every repeat of every configuration, depth 1 and depth 2 back to back on the same
  requests (a repeat's workload seed), so they pair up; the in-process timeline is the trace. This
  is what the cost model is fed.
- under nsys (when found): the first `nsys_repeats` repeats again, each run its own capture range,
  so one nsys session writes one report per run. Set beside the unprofiled runs they show what the
  profiler did to each phase (costmodel.perturbation).

On the CPU (the demo) the unprofiled pass runs in this process. `bubblelab.runs.assemble` ingests
what the passes wrote (it also reads a sweep cut short) into the catalog and results.json.

Every finished run is kept the moment it finishes (its record, written whole): a failure, Ctrl-C
or a profiler that dies stops the sweep and leaves a directory that `resume` completes (only the
missing runs; an nsys pass cut short runs again whole, as nsys numbers its reports per session)
and `bubblelab report` reports from what finished (bubblelab.runs.state).
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..core.checks import check_choice, check_float, check_int, parse_ints
from ..core.errors import BubblelabError
from ..core.files import write_atomic
from ..engine.config import MAX_NUM_SEQS, EngineConfig, default_dtype
from ..profiling.nsys import find_nsys, profile_ranges
from . import state as run_state
from .assemble import assemble, nsys_reports
from .plain import check_streams_fit
from .worker import run_plan
from .workload import CONSTRAINTS, MAX_STREAMS, WorkloadSpec

MIN_DECODE_STEPS = (
    400  # a run long enough to predict: ~400 decode steps (4 requests a stream at L=110)
)


@dataclass
class SweepSpec:
    model: str | None = None
    device: str = "cpu"
    dtype: str | None = None  # None: default_dtype(device)
    depths: list[int] = field(default_factory=lambda: [1, 2])
    streams: list[int] = field(default_factory=lambda: [1, 8, 32])
    output_len_mean: float = 110.0
    requests_per_stream: int | None = None  # None: enough for MIN_DECODE_STEPS decode steps a run
    prompt_len: int = 32
    repeats: int = 5
    nsys_repeats: int = 1
    constraint: str | None = None
    constrained_share: float = 0.0
    max_model_len: int = 512
    max_num_batched_tokens: int = 8192
    enforce_eager: bool = False
    attention_backend: str = "auto"
    seed: int = 0
    tensor_parallel: int = 1

    def __post_init__(self) -> None:
        """Every option checked here, before a directory is made or a model loaded."""
        if self.dtype is None:  # '' is refused below, not defaulted
            self.dtype = default_dtype(self.device)
        self.depths = parse_ints("depths", self.depths, 1, 2)
        self.streams = parse_ints("streams", self.streams, 1, MAX_STREAMS)
        check_streams_fit(self.streams)
        if self.requests_per_stream is not None:
            check_int("requests_per_stream", self.requests_per_stream, 1, 10_000)
        check_int("repeats", self.repeats, 1, 1000)
        check_int("nsys_repeats", self.nsys_repeats, 1, 1000)
        check_float("output_len_mean", self.output_len_mean, 1, 1e6)
        if self.constraint is not None:
            check_choice("constraint", self.constraint, CONSTRAINTS)
        for depth in self.depths:  # the engine's and the workload's own rules
            EngineConfig(**self.engine(), depth=depth)
        for run in self.runs(1):
            WorkloadSpec(**run["workload"]).check_fits(self.max_model_len)

    def per_stream(self) -> int:
        if self.requests_per_stream is not None:
            return self.requests_per_stream
        return max(2, math.ceil(MIN_DECODE_STEPS / self.output_len_mean))

    def engine(self) -> dict:
        """EngineConfig kwargs every run shares (its depth aside): one batch-row budget for the
        sweep, so
        one engine and one graph capture serve every stream count."""
        return dict(
            model=self.model, device=self.device, dtype=self.dtype,
            max_num_seqs=min(max(8, *self.streams), MAX_NUM_SEQS),
            max_model_len=self.max_model_len,
            max_num_batched_tokens=self.max_num_batched_tokens, enforce_eager=self.enforce_eager,
            attention_backend=self.attention_backend, seed=self.seed,
            tensor_parallel=self.tensor_parallel,
        )  # fmt: skip

    def runs(self, repeats: int | None = None) -> list[dict]:
        """The runs in the order they run: per repeat, per stream count, the depths back to back on
        the
        same requests (the repeat's seed)."""
        out = []
        for r in range(self.repeats if repeats is None else repeats):
            for s in self.streams:
                for d in self.depths:
                    workload = dict(
                        streams=s, requests=s * self.per_stream(),
                        output_len_mean=self.output_len_mean, prompt_len=self.prompt_len,
                        constraint=self.constraint, constrained_share=self.constrained_share,
                        seed=self.seed + r,
                    )  # fmt: skip
                    out.append(dict(tag=f"s{s}-d{d}-r{r}", depth=d, repeat=r, workload=workload))
        return out


def sweep_spec(depths: str | list[int], streams: str | list[int], **options: Any) -> SweepSpec:
    """A SweepSpec from the command line's lists ("1,8,32"), checked like any other."""
    return SweepSpec(
        depths=parse_ints("depths", depths, 1, 2),
        streams=parse_ints("streams", streams, 1, MAX_STREAMS),
        **options,
    )


def passes(spec: SweepSpec, nsys: bool) -> list[tuple[str, list[dict], bool]]:
    """(name, runs, profiled) of each pass, in the order they run."""
    out = [("plain", spec.runs(), False)]
    if nsys:
        out.append(("nsys", spec.runs(min(spec.nsys_repeats, spec.repeats)), True))
    return out


def run_sweep(
    spec: SweepSpec,
    out_dir: Path,
    *,
    use_nsys: bool | None = None,
    resume: bool = False,
    force: bool = False,
    on_run: Callable[[str, dict], None] | None = None,
    say: Callable[[str], None] = print,
    on_plan: Callable[[int, int], None] | None = None,
) -> Path:
    """Run both passes (what out_dir lacks of them), then assemble out_dir (runs/, traces/,
    catalog.duckdb, results.json). on_plan(runs planned, runs already finished) is called once the
    passes are known (whether nsys profiles is decided here), before any run.

    A new out_dir must not hold a run; an existing one is continued with resume (same options) or
    replaced with force. On a failure or Ctrl-C every finished run stays, DIR/status.json says what
    happened, and a sweep that finished nothing leaves nothing behind.
    """
    if not resume:  # refused before anything is said about the profiler
        run_state.check_new_run_dir(out_dir, force=force)
    saved = run_state.read_state(out_dir) if resume else None
    nsys = _nsys_or_none(use_nsys, say, saved)
    created = not out_dir.exists()
    todo = passes(spec, bool(nsys))
    planned = [f"{name}/{run['tag']}" for name, runs, _ in todo for run in runs]
    profiler = "nsys" if nsys else "timeline"
    state = run_state.open_run_dir(
        out_dir, asdict(spec), planned, profiler, resume=resume, force=force
    )
    for record in run_state.set_aside_damaged(out_dir) if resume else ():
        say(f"{record} is damaged: running it again")
    if done := run_state.finished_runs(out_dir):
        say(f"{len(done)} runs already finished in {out_dir}: running the rest")
    if on_plan is not None:
        on_plan(len(planned), len(done & set(planned)))
    timings_path = out_dir / "runs" / "timings.json"
    timings = run_state.read_json(timings_path) if timings_path.is_file() else {}
    try:
        for name, runs, profiled in todo:
            if profiled and not _whole_nsys_pass(out_dir, runs):
                run_state.clear_pass(out_dir, name)  # nsys numbers its reports per session
            plan = dict(engine=spec.engine(), runs=runs, out_dir=str(out_dir / "runs" / name),
                        profile=profiled)  # fmt: skip
            finished = run_state.finished_runs(out_dir)
            left = [r["tag"] for r in runs if f"{name}/{r['tag']}" not in finished]
            if not left:
                continue
            started, launched = time.perf_counter(), time.time()
            _run_pass(plan, out_dir, on_run, left)
            timings[name] = _pass_timings(out_dir / "runs" / name, launched, started)
            write_atomic(timings_path, json.dumps(timings, indent=1))
        assemble(out_dir)
    except BaseException as e:
        error = _stopped(out_dir, state, e, created=created and not resume, say=say)
        if error is not None:
            raise error from None
        raise
    run_state.mark(out_dir, state, "complete")
    return out_dir


def _pass_timings(run_dir: Path, launched: float, started: float) -> dict[str, float]:
    """The pass's wall clock, and the parts outside its worker's own work: `start_s` from launch to
    the worker's first line (the interpreter, its imports, nsys starting up) and `finish_s` from the
    worker's last line to the pass's end (under nsys: its last reports, their export)."""
    ended = time.time()
    out = {"wall_s": time.perf_counter() - started}
    worker = run_dir / "worker.json"
    if worker.is_file():
        w = json.loads(worker.read_text())
        if "started_unix" in w and "ended_unix" in w:
            out |= {"start_s": w["started_unix"] - launched, "finish_s": ended - w["ended_unix"]}
    return out


def _whole_nsys_pass(out_dir: Path, runs: list[dict]) -> bool:
    """Every run of the nsys pass recorded and its report written, or none begun."""
    recorded = [r for r in runs if (out_dir / "runs" / "nsys" / f"{r['tag']}.json").is_file()]
    return not recorded or (len(recorded) == len(runs) == len(nsys_reports(out_dir)))


def _stopped(
    out_dir: Path, state: dict, e: BaseException, *, created: bool, say: Callable[[str], None]
) -> BubblelabError | None:
    """Record why the sweep stopped (the first planned run without a record was running) and keep
    what finished; a new sweep that finished nothing leaves nothing. Returns the one-line error to
    raise instead of a BubblelabError (a bug keeps its traceback)."""
    interrupted = isinstance(e, KeyboardInterrupt)
    reason = "interrupted" if interrupted else " ".join(str(e).split()) or type(e).__name__
    finished = run_state.finished_runs(out_dir)
    # The first planned run without a record was running; none: every run had finished and the
    # results were being assembled.
    running = next((run for run in state["planned"] if run not in finished), None)
    failed = {"run": running, "error": reason}
    run_state.mark(out_dir, state, "interrupted" if interrupted else "failed", failed=failed)
    known = isinstance(e, BubblelabError)
    if not finished:
        if created:
            run_state.remove_sweep(out_dir)
        return (
            BubblelabError(f"run {running} failed: {reason} (no run finished)") if known else None
        )
    what = f"run {running}" if running else "assembling the results"
    say(
        f"{what}: {reason}. {len(finished)} finished runs kept in {out_dir}: "
        f"`bubblelab report {out_dir}` reports them, "
        f"`bubblelab run-and-profile --resume {out_dir}` runs the rest"
    )
    if known:
        return BubblelabError(
            f"{what} failed: {reason} ({len(finished)} finished runs kept in {out_dir})"
        )
    return None


def _run_pass(plan: dict, out_dir: Path, on_run, left: list[str]) -> None:
    """One worker, writing a record per run it makes (it skips the runs already recorded): in
    this process on the CPU, else its own process (under nsys when profiled)."""
    run_dir = Path(plan["out_dir"])
    plan_path = write_atomic(run_dir / "plan.json", json.dumps(plan, indent=1))
    argv = [sys.executable, "-m", "bubblelab.runs.worker", str(plan_path)]
    if plan["profile"]:
        profile_ranges(out_dir / "traces" / "run", argv, log=run_dir / "nsys.log")
    elif plan["engine"]["device"] == "cpu":
        run_plan(plan, on_run=on_run)
        return
    else:
        _run_worker(argv)
    for tag in left if on_run is not None else []:
        on_run(tag, json.loads((run_dir / f"{tag}.json").read_text())["summary"])


def _run_worker(argv: list[str]) -> None:
    import subprocess

    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
        raise BubblelabError(f"the sweep's worker failed: {' | '.join(tail)}")


def _nsys_or_none(
    use_nsys: bool | None, say: Callable[[str], None], saved: dict | None = None
) -> str | None:
    if saved is not None:  # a resumed sweep profiles as it began
        use_nsys = saved.get("profiler") == "nsys"
    if use_nsys is False:
        return None
    try:
        nsys = find_nsys()
        if importlib.util.find_spec("nvtx") is None:  # the engine's ranges are what nsys reads
            raise BubblelabError("nsys needs the nvtx package: pip install 'bubblelab[cuda]'")
        return nsys
    except BubblelabError as e:
        if use_nsys:
            raise
        say(f"not profiling under nsys ({e}); using the in-process timeline instead")
        return None
