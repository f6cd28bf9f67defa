"""run-and-profile: a sweep of (streams, depth) runs, measured unprofiled and under nsys.

Two passes over the same configurations, each one process (bubblelab.runs.worker) that loads the
model, compiles and captures its CUDA graphs once:

- under nsys (when found), first: the first `nsys_repeats` repeats (one by default: a depth-1 and a
  depth-2 run of each configuration, or only the `nsys_depths`), in one capture range with each run
  marked in it, cut into one trace per run after (runs.passes; profiling.nsys.capture_mode). Set
  beside the unprofiled runs they show what the profiler did to each phase (costmodel.perturbation).
- unprofiled: each configuration's repeats, depth 1 and depth 2 back to back on the same requests
  (a repeat's workload seed), so they pair up, until the observed speedup is known to ±1 point or
  the configuration's time budget is spent (runs.repeats, costmodel.repeats: at least
  `min_repeats` pairs, at most `repeats`); the in-process timeline is the trace. This is what the
  cost model is fed. Its worker starts while nsys finishes its reports, and times its first run
  once nsys is done (bubblelab.runs.passes). On the GPU its pairs are spread over `processes`
  workers, one after another: each process draws its own host speed, and a speedup known within
  one process can be 3 points off in the next (docs/measurements.md section 7), so the interval
  covers every process's median.

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
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..core.checks import check_choice, check_float, check_int, parse_ints
from ..core.errors import BubblelabError
from ..core.files import write_atomic
from ..core.words import counted
from ..costmodel.observed import MEDIAN_95_VALUES
from ..costmodel.repeats import RepeatRule, pair_order
from ..engine.config import (
    MAX_NUM_SEQS,
    PREFILL_BUCKET_STEP,
    EngineConfig,
    check_model,
    default_dtype,
)
from ..profiling.nsys import GRAPH_TRACE_MODES, capture_mode, find_nsys
from . import passes as run_passes
from . import state as run_state
from . import stopped
from .assemble import assemble, needs_assembly, nsys_reports
from .record import find_record, read_record
from .repeats import needed, quota_met, read_verdicts, unneeded, verdict_lines
from .workload import CONSTRAINTS, MAX_STREAMS, WorkloadSpec, check_streams_fit

MIN_DECODE_STEPS = (
    400  # a run long enough to predict: ~400 decode steps (4 requests a stream at L=110)
)


def prefill_budget(streams: list[int], prompt_len: int, graphs: bool) -> int:
    """A sweep's token budget a step (max_num_batched_tokens): EngineConfig's, or where the engine
    captures CUDA graphs the most prompt tokens one admission can hold (the most streams in flight
    times the prompt length, rounded up to a prefill bucket step). Every prefill bucket up to the
    budget is warmed up, captured and replayed in each worker process; those past what the workload
    admits cost a warm qwen3-4b worker 3.4 s of its set-up on an H200 (docs/measurements.md section
    7). The steps are the same, except where preempted sequences, longer than a prompt, come back
    together."""
    default = EngineConfig.max_num_batched_tokens
    if not graphs:
        return default
    step = PREFILL_BUCKET_STEP  # the engine's prefill buckets: a budget on one adds none past it
    return min(default, step * -(-max(streams) * prompt_len // step))


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
    repeats: int = 20  # pairs a configuration runs at most (runs.repeats: fewer once known)
    min_repeats: int = 3  # ...and at least (with one depth: one_depth_runs)
    budget_s: float = 30.0  # seconds of runs a configuration may take before it stops unknown
    out_of_reach: bool = True  # ...or stop it once ±1 point is out of reach (costmodel.repeats)
    processes: int | None = None  # worker processes the pairs are spread over: 2 on the GPU
    nsys_repeats: int = 1
    nsys_depths: list[int] | None = None  # the depths the nsys pass profiles (None: every one)
    # nsys --cuda-graph-trace: "node" shows the kernels inside graphs (the kernel view), "graph"
    # keeps the host's timing close to the unprofiled engine's (a prediction from the trace)
    cuda_graph_trace: str = "node"
    constraint: str | None = None
    constrained_share: float = 0.0
    arrival_rate: float | None = None  # Poisson arrivals per second; None: a closed loop
    max_model_len: int = 512
    max_num_batched_tokens: int | None = None  # None: prefill_budget's
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
        check_streams_fit(self.streams, MAX_NUM_SEQS)
        if self.max_num_batched_tokens is None:
            graphs = self.device != "cpu" and not self.enforce_eager
            self.max_num_batched_tokens = prefill_budget(self.streams, self.prompt_len, graphs)
        if self.requests_per_stream is not None:
            check_int("requests_per_stream", self.requests_per_stream, 1, 10_000)
        check_int("repeats", self.repeats, 1, 1000)
        check_int("min_repeats", self.min_repeats, 1, 1000)
        if self.processes is None:
            self.processes = 1 if self.device == "cpu" else 2
        check_int("processes", self.processes, 1, 16)
        if self.device == "cpu" and self.processes > 1:  # passes.in_process
            raise BubblelabError(
                f"processes {self.processes}: a CPU sweep runs its unprofiled pairs in this "
                "process, so 1; worker processes are the GPU's"
            )
        self.rule()  # the repeat rule's own checks
        check_int("nsys_repeats", self.nsys_repeats, 1, 1000)
        if self.nsys_depths is not None:
            self.nsys_depths = parse_ints("nsys_depths", self.nsys_depths, 1, 2)
            if not set(self.nsys_depths) <= set(self.depths):
                raise BubblelabError(
                    f"nsys_depths {self.nsys_depths} must be among the depths run, {self.depths}"
                )
        check_choice("cuda_graph_trace", self.cuda_graph_trace, GRAPH_TRACE_MODES)
        check_float("output_len_mean", self.output_len_mean, 1, 1e6)
        if self.constraint is not None:
            check_choice("constraint", self.constraint, CONSTRAINTS)
        check_model(self.model)
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

    def one_depth_runs(self) -> int:
        """With one depth there is no speedup to know, but the forecast's interval (costmodel.
        forecast) is a median's, which needs MEDIAN_95_VALUES runs: that many, or min_repeats, at
        most repeats."""
        return min(max(self.min_repeats, MEDIAN_95_VALUES), self.repeats)

    def rule(self) -> RepeatRule | None:
        """How many pairs each configuration runs (costmodel.repeats); None with one depth, where
        each configuration makes one_depth_runs."""
        if sorted(self.depths) != [1, 2]:
            return None
        return RepeatRule(
            self.budget_s,
            min(self.min_repeats, self.repeats),
            self.repeats,
            self.out_of_reach,
            self.processes or 1,  # set in __post_init__
        )

    def runs(self, repeats: int | None = None, depths: list[int] | None = None) -> list[dict]:
        """The runs in the order they run: per stream count, its repeats (as many as the repeat
        rule may ask for, or `repeats`), each repeat's depths back to back on the same requests (the
        repeat's seed), in ABBA order."""
        if repeats is None:
            repeats = self.repeats if self.rule() else self.one_depth_runs()
        depths = self.depths if depths is None else depths
        out = []
        for s in self.streams:
            for r in range(repeats):
                order = pair_order(r) if sorted(depths) == [1, 2] else depths
                for d in order:
                    workload = dict(
                        streams=s, requests=s * self.per_stream(),
                        output_len_mean=self.output_len_mean, prompt_len=self.prompt_len,
                        constraint=self.constraint, constrained_share=self.constrained_share,
                        arrival_rate=self.arrival_rate, seed=self.seed + r,
                    )  # fmt: skip
                    out.append(dict(tag=f"s{s}-d{d}-r{r}", config=f"s{s}", depth=d, repeat=r,
                                    workload=workload))  # fmt: skip
        return out


def sweep_spec(depths: str | list[int], streams: str | list[int], **options: Any) -> SweepSpec:
    """A SweepSpec from the command line's lists ("1,8,32"), checked like any other."""
    return SweepSpec(
        depths=parse_ints("depths", depths, 1, 2),
        streams=parse_ints("streams", streams, 1, MAX_STREAMS),
        **options,
    )


def passes(spec: SweepSpec, nsys: bool) -> list[tuple[str, list[dict], bool]]:
    """(name, runs, profiled) of each pass, in the order they run: under nsys the profiled pass
    first, so that the unprofiled pass's start-up hides nsys's wrap-up (runs.passes)."""
    out = [("plain", spec.runs(), False)]
    if nsys:
        nsys_runs = spec.runs(min(spec.nsys_repeats, spec.repeats), spec.nsys_depths)
        out.insert(0, ("nsys", nsys_runs, True))
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
    keep_reports: bool = False,
) -> Path:
    """Run both passes (what out_dir lacks of them), then assemble out_dir (runs/, traces/,
    catalog.duckdb, results.json) unless nothing ran and its results are current. on_plan(runs
    planned, runs already finished) is called once the passes are known (whether nsys profiles is
    decided here), before any run. keep_reports: keep nsys's .nsys-rep files beside their
    (gzipped) SQLite exports.

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
        say(f"{counted(len(done), 'run')} already finished in {out_dir}: running the rest")
    if on_plan is not None:
        on_plan(len(planned), len(done & set(planned)))
    timings_path = out_dir / "runs" / "timings.json"
    timings = run_state.read_json(timings_path) if timings_path.is_file() else {}
    running: list[run_passes.Pass] = []  # launched, each gated on the one before (runs.passes)

    def finish_running() -> None:
        while running:
            p = running.pop(0)
            timings[p.name] = run_passes.finish(p, on_run, keep_reports)
            write_atomic(timings_path, json.dumps(timings, indent=1))

    started = time.perf_counter()
    ran = False  # a resumed sweep with nothing left is not assembled again (needs_assembly)
    try:
        for name, runs, profiled in todo:
            if profiled and not _whole_nsys_pass(out_dir, runs):
                run_state.clear_pass(out_dir, name)  # nsys numbers its reports per session
            rule = spec.rule() if not profiled else None
            plan = dict(engine=spec.engine(), runs=runs, out_dir=str(out_dir / "runs" / name),
                        profile=profiled, repeat_rule=asdict(rule) if rule else None,
                        cuda_graph_trace=spec.cuda_graph_trace,
                        capture=capture_mode(spec.engine()) if profiled
                        else None)  # fmt: skip
            workers = rule.processes if rule else 1
            finished = run_state.finished_runs(out_dir)
            wanted = needed(runs, read_verdicts(out_dir / "runs" / name))
            left = [r["tag"] for r in wanted if f"{name}/{r['tag']}" not in finished]
            if not left:
                continue
            ran = True
            if run_passes.in_process(plan):
                finish_running()
                timings[name] = run_passes.run_here(plan, left, on_run)
                write_atomic(timings_path, json.dumps(timings, indent=1))
            else:  # each worker gated on the one before (runs.passes)
                for process in range(1, workers + 1):
                    if process < workers and quota_met(plan, process):  # resumed: done before
                        continue
                    after = running[-1] if running else None
                    running.append(run_passes.launch(name, plan, out_dir, left, after, process))
        finish_running()
        if (out_dir / "runs" / "plain").is_dir():
            _repeats_done(out_dir, state, "plain", say, on_plan)
        if ran:  # the passes overlap: their walls do not add up to the sweep's
            timings["passes"] = {"wall_s": time.perf_counter() - started}
            write_atomic(timings_path, json.dumps(timings, indent=1))
        if flagged := flagged_runs(out_dir):
            say(f"{counted(len(flagged), 'run')} met something in their timed region: "
                + "; ".join(flagged[:4]) + ("; ..." if len(flagged) > 4 else ""))  # fmt: skip
        if ran or needs_assembly(out_dir):
            assemble(out_dir)
        else:
            say(f"nothing left to run in {out_dir}: its results are up to date")
    except BaseException as e:
        run_passes.stop(running)
        error = stopped.record_stop(out_dir, state, e, created=created and not resume, say=say)
        if error is not None:
            raise error from None
        raise
    run_state.mark(out_dir, state, "complete")
    return out_dir


def _repeats_done(out_dir: Path, state: dict, name: str, say, on_plan) -> None:
    """After the unprofiled pass: say where each configuration's repeats stopped and why, and plan
    no more of the runs the rule did not need."""
    for line in verdict_lines(read_verdicts(out_dir / "runs" / name)):
        say(line)
    skipped = {f"{name}/{tag}" for tag in unneeded(out_dir / "runs" / name)}
    if skipped & set(state["planned"]):
        state["planned"] = [run for run in state["planned"] if run not in skipped]
        run_state.write_state(out_dir, state)
        if on_plan is not None:  # the progress bar's total: the runs that will have run
            on_plan(len(state["planned"]), len(run_state.finished_runs(out_dir)))


def flagged_runs(out_dir: Path) -> list[str]:
    """'<pass>/<tag>: <flags>' for each finished run whose timed region met what a warm engine
    should not (runs.region.flags)."""
    out = []
    for run in sorted(run_state.finished_runs(out_dir)):
        pass_name, tag = run.split("/")
        summary = read_record(out_dir / "runs" / pass_name, tag)["summary"]
        if summary.get("timing_flags"):
            out.append(f"{run}: {', '.join(summary['timing_flags'])}")
    return out


def _whole_nsys_pass(out_dir: Path, runs: list[dict]) -> bool:
    """Every run of the nsys pass recorded and its report written, or none begun."""
    recorded = [r for r in runs if find_record(out_dir / "runs" / "nsys", r["tag"]) is not None]
    return not recorded or (len(recorded) == len(runs) == len(nsys_reports(out_dir)))


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
