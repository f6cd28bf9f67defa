"""run-and-profile: a sweep of (streams, depth) runs, measured unprofiled and under nsys.

Two passes over the same configurations, each one process (bubblelab.runs.worker) that loads the
model, compiles and captures its CUDA graphs once:

- unprofiled: every repeat of every configuration, depth 1 and depth 2 back to back on the same
  requests (a repeat's workload seed), so they pair up; the in-process timeline is the trace. This
  is what the cost model is fed.
- under nsys (when found): the first `nsys_repeats` repeats again, each run its own capture range,
  so one nsys session writes one report per run. Set beside the unprofiled runs they show what the
  profiler did to each phase (costmodel.perturbation).

On the CPU (the demo) the unprofiled pass runs in this process. `assemble` ingests what the passes
wrote (it also reads a sweep cut short) into the catalog and results.json.
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

import pandas as pd

from bubblelab.errors import BubblelabError
from bubblelab.profiling import analysis
from bubblelab.profiling.catalog import connect
from bubblelab.profiling.ingest import ingest, ingest_timeline
from bubblelab.profiling.nsys import find_nsys, nsys_version, profile_ranges
from bubblelab.runs.machine import machine_facts
from bubblelab.runs.rundir import write_results
from bubblelab.runs.tables import collect
from bubblelab.runs.worker import rank_timelines_from_record, run_plan, timeline_from_record

MIN_DECODE_STEPS = (
    400  # a run long enough to predict: ~400 decode steps (4 requests a stream at L=110)
)


@dataclass
class SweepSpec:
    model: str | None = None
    device: str = "cpu"
    dtype: str = "fp32"
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
            max_num_seqs=max(8, *self.streams), max_model_len=self.max_model_len,
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


def run_sweep(
    spec: SweepSpec,
    out_dir: Path,
    *,
    use_nsys: bool | None = None,
    on_run: Callable[[str, dict], None] | None = None,
    say: Callable[[str], None] = print,
) -> Path:
    """Run both passes, then assemble out_dir (runs/, traces/, catalog.duckdb, results.json)."""
    (out_dir / "runs").mkdir(parents=True, exist_ok=True)
    (out_dir / "sweep.json").write_text(json.dumps(asdict(spec), indent=1))
    passes = [("plain", spec.runs(), False)]
    if _nsys_or_none(use_nsys, say):
        passes.append(("nsys", spec.runs(min(spec.nsys_repeats, spec.repeats)), True))
    timings = {}
    for name, runs, profiled in passes:
        plan = dict(engine=spec.engine(), runs=runs, out_dir=str(out_dir / "runs" / name),
                    profile=profiled)  # fmt: skip
        started = time.perf_counter()
        _run_pass(plan, out_dir, on_run)
        timings[name] = {"wall_s": time.perf_counter() - started}
        (out_dir / "runs" / "timings.json").write_text(json.dumps(timings, indent=1))
    return assemble(out_dir)


def assemble(out_dir: Path, strict: bool = True) -> Path:
    """Ingest what a sweep's passes left in out_dir (runs/<pass>/<tag>.json, traces/run.<n>.sqlite)
    and write results.json. strict=False reads a sweep cut short: the runs that finished, and the
    nsys pass only if every one of its reports was written."""
    spec = SweepSpec(**json.loads((out_dir / "sweep.json").read_text()))
    catalog = connect(out_dir / "catalog.duckdb")
    timings_path = out_dir / "runs" / "timings.json"
    timings = json.loads(timings_path.read_text()) if timings_path.is_file() else {}
    run_ids, extras, requests = [], [], []
    for name in ("plain", "nsys"):
        run_dir = out_dir / "runs" / name
        if not (run_dir / "plan.json").is_file():
            continue
        plan = json.loads((run_dir / "plan.json").read_text())
        runs = [r for r in plan["runs"] if (run_dir / f"{r['tag']}.json").is_file()]
        profiled = bool(plan["profile"])
        traces = _traces(out_dir) if profiled else []
        if profiled and len(traces) != len(plan["runs"]):
            if strict:
                raise BubblelabError(
                    f"nsys wrote {len(traces)} reports for {len(plan['runs'])} runs"
                )
            continue
        started = time.perf_counter()
        # The nsys pass's own timelines go beside the traces (benchmarks/compare_nsys_timeline.py).
        timelines = connect(out_dir / "timeline.duckdb") if profiled else catalog
        for i, run in enumerate(runs):
            record = json.loads((run_dir / f"{run['tag']}.json").read_text())
            meta = _meta(record["summary"], spec, plan)
            run_id = ingest_timeline(
                timeline_from_record(record), timelines, {**meta, "rank": 0},
                run_id=f"{run['tag']}-{'nsys-' if profiled else ''}timeline",
            )  # fmt: skip
            for rank, timeline in enumerate(rank_timelines_from_record(record), 1):
                ingest_timeline(timeline, timelines, {**meta, "rank": rank},
                                run_id=f"{run_id}-rank{rank}")  # fmt: skip
            if profiled:
                meta = {**meta, "nsys_version": nsys_version()}
                run_id = _ingest_trace(traces[i], record, meta, catalog)
            run_ids.append(run_id)
            extras.append(_extra(run_id, run, spec, profiled, record["summary"]))
            requests.append(pd.DataFrame(record["requests"]).assign(run_id=run_id))
        worker = run_dir / "worker.json"
        timings.setdefault(name, {}).update(
            json.loads(worker.read_text()) if worker.is_file() else {},
            ingest_s=time.perf_counter() - started,
        )
    if not run_ids:
        raise BubblelabError(f"{out_dir} holds no finished run")
    results = collect(catalog, run_ids, provenance={
        "sweep": asdict(spec), "command": " ".join(sys.argv), "timings": timings,
        "catalog": str(out_dir / "catalog.duckdb"), "machine": machine_facts(),
    })  # fmt: skip
    runs_table = results.runs.merge(pd.DataFrame(extras), on="run_id", how="left")
    write_results(
        out_dir, runs_table, results.steps, results.attribution, results.gaps,
        results.provenance, results.timeline, pd.concat(requests, ignore_index=True),
    )  # fmt: skip
    return out_dir


def _traces(out_dir: Path) -> list[Path]:
    """The nsys pass's reports (traces/run.<n>.sqlite), in the order their ranges ran."""
    found = [(int(p.name.split(".")[1]), p) for p in (out_dir / "traces").glob("run.*.sqlite")]
    return [p for _, p in sorted(found)]


def _run_pass(plan: dict, out_dir: Path, on_run) -> None:
    """One worker, writing a record per run: in this process on the CPU, else its own process (under
    nsys when profiled)."""
    run_dir = Path(plan["out_dir"])
    run_dir.mkdir(parents=True, exist_ok=True)
    plan_path = run_dir / "plan.json"
    plan_path.write_text(json.dumps(plan, indent=1))
    argv = [sys.executable, "-m", "bubblelab.runs.worker", str(plan_path)]
    if plan["profile"]:
        profile_ranges(out_dir / "traces" / "run", argv)
    elif plan["engine"]["device"] == "cpu":
        run_plan(plan, on_run=on_run)
        return
    else:
        _run_worker(argv)
    for run in plan["runs"] if on_run is not None else []:
        on_run(run["tag"], json.loads((run_dir / f"{run['tag']}.json").read_text())["summary"])


def _run_worker(argv: list[str]) -> None:
    import subprocess

    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
        raise BubblelabError(f"the sweep's worker failed: {' | '.join(tail)}")


def _ingest_trace(trace: Path, record: dict, meta: dict, catalog) -> str:
    """Ingest one run's report, checking it is the run the worker recorded (the reports are matched
    to
    runs by their order)."""
    run_id = ingest(trace, None, meta, con=catalog)
    steps = analysis.per_step(catalog, run_id)
    found = (int((steps["kind"] == "decode").sum()), int(steps["depth"].max()))
    expected = (
        sum(s["kind"] == "decode" for s in record["timeline"]["steps"]),
        record["summary"]["depth"],
    )
    if found != expected:
        raise BubblelabError(
            f"{trace.name} holds {found[0]} decode steps at depth {found[1]}, its run "
            f"{expected[0]} at depth {expected[1]}: reports out of order?"
        )
    return run_id


def _nsys_or_none(use_nsys: bool | None, say: Callable[[str], None]) -> str | None:
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


def _meta(summary: dict, spec: SweepSpec, plan: dict) -> dict:
    """Run metadata for the catalog (docs/phases.md)."""
    keys = (
        "model",
        "depth",
        "streams",
        "output_len_mean",
        "mean_generated_len",
        "requests",
        "device",
        "driver",
        "torch",
        "wall_s",
        "generated_tokens",
        "decode_steps",
        "started_at",
    )
    command = ["bubblelab", *sys.argv[1:]] if sys.argv[0].endswith("bubblelab") else [repr(spec)]
    return {**{k: summary.get(k) for k in keys}, "preset": plan["engine"]["model"],
            "tensor_parallel": plan["engine"].get("tensor_parallel", 1),
            "command": " ".join(command)}  # fmt: skip


def _extra(run_id: str, run: dict, spec: SweepSpec, profiled: bool, summary: dict) -> dict:
    """The run columns schema 2 adds beside the catalog's (bubblelab.runs.schema)."""
    engine = spec.engine()
    return dict(
        run_id=run_id, repeat=run["repeat"], profiled=profiled, prompt_len=spec.prompt_len,
        constraint=spec.constraint, constrained_share=spec.constrained_share,
        max_num_seqs=engine["max_num_seqs"], max_num_batched_tokens=spec.max_num_batched_tokens,
        max_model_len=spec.max_model_len, sm_clock_mhz=summary.get("sm_clock_mhz_median"),
        power_w=summary.get("power_w_median"),
        clock_anchor_us_max=summary.get("clock_anchor_us_max"),
    )  # fmt: skip
