"""run-and-profile: a sweep of (streams, depth) runs, under nsys when found, ingested, analysed and
reported.

Each run is one worker process (bubblelab.runs.worker) so that nsys wraps exactly one engine with a
capture range that starts after warm-up. Depth 1 and depth 2 of a configuration run back to back.
Without nsys the same worker function runs in this process and its in-process timeline is the trace.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bubblelab.engine.timeline import Timeline
from bubblelab.errors import BubblelabError
from bubblelab.profiling.catalog import connect
from bubblelab.profiling.ingest import ingest, ingest_timeline
from bubblelab.profiling.nsys import export_path, find_nsys, nsys_version, run_under_nsys
from bubblelab.runs.rundir import write_results
from bubblelab.runs.tables import collect
from bubblelab.runs.worker import result_record, timeline_from_record


@dataclass
class SweepSpec:
    model: str | None = None
    device: str = "cpu"
    dtype: str = "fp32"
    depths: list[int] = field(default_factory=lambda: [1, 2])
    streams: list[int] = field(default_factory=lambda: [1, 8, 32])
    output_len_mean: float = 110.0
    requests_per_stream: int = 4
    prompt_len: int = 32
    repeats: int = 1
    constraint: str | None = None
    constrained_share: float = 0.0
    max_model_len: int = 512
    enforce_eager: bool = False
    attention_backend: str = "auto"
    seed: int = 0

    def configs(self) -> list[tuple[str, dict]]:
        # One batch-row budget for the whole sweep: one engine (one graph capture) per depth, same
        # graph buckets.
        rows = max(8, *self.streams)
        out = []
        for r in range(self.repeats):
            for s in self.streams:
                for d in self.depths:  # depths back to back
                    out.append(
                        (
                            f"s{s}-d{d}-r{r}",
                            {
                                "engine": dict(
                                    model=self.model,
                                    device=self.device,
                                    dtype=self.dtype,
                                    depth=d,
                                    max_num_seqs=rows,
                                    max_model_len=self.max_model_len,
                                    enforce_eager=self.enforce_eager,
                                    attention_backend=self.attention_backend,
                                    seed=self.seed,
                                ),
                                "workload": dict(
                                    streams=s,
                                    requests=s * self.requests_per_stream,
                                    output_len_mean=self.output_len_mean,
                                    prompt_len=self.prompt_len,
                                    constraint=self.constraint,
                                    constrained_share=self.constrained_share,
                                    seed=self.seed + r,
                                ),
                            },
                        )
                    )
        return out


def run_sweep(
    spec: SweepSpec,
    out_dir: Path,
    *,
    use_nsys: bool | None = None,
    on_run: Callable[[str, dict], None] | None = None,
    say: Callable[[str], None] = print,
) -> Path:
    """Run every configuration, fill out_dir (traces/, runs/, catalog.duckdb, results.json) and
    return it."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "runs").mkdir(exist_ok=True)
    nsys = _nsys_or_none(use_nsys, say)
    catalog = connect(out_dir / "catalog.duckdb")
    timelines = connect(out_dir / "timeline.duckdb") if nsys else catalog
    loaded_cache: dict = {}
    run_ids = []
    for tag, config in spec.configs():
        record_path = out_dir / "runs" / f"{tag}.json"
        config = {**config, "out_json": str(record_path), "nvtx": bool(nsys), "profile": bool(nsys)}
        (out_dir / "runs" / f"{tag}.config.json").write_text(json.dumps(config, indent=1))
        argv = [
            sys.executable,
            "-m",
            "bubblelab.runs.worker",
            str(out_dir / "runs" / f"{tag}.config.json"),
        ]
        started = time.strftime("%Y-%m-%d %H:%M:%S")
        if nsys:
            run_under_nsys(out_dir / "traces" / tag, argv)
            record = json.loads(record_path.read_text())
        else:
            record = result_record(_run_in_process(config, loaded_cache))
            record_path.write_text(json.dumps(record))
        meta = _meta(record["summary"], config, argv if nsys else _inprocess_command(spec), started)
        timeline = timeline_from_record(record)
        run_id = ingest_timeline(timeline, timelines, meta, run_id=f"{tag}-timeline")
        if nsys:
            run_id = ingest(
                export_path(out_dir / "traces" / tag),
                None,
                {**meta, "nsys_version": nsys_version()},
                con=catalog,
            )
        run_ids.append(run_id)
        if on_run is not None:
            on_run(tag, record["summary"])
    results = collect(
        catalog,
        run_ids,
        provenance={
            "sweep": asdict(spec),
            "command": " ".join(sys.argv),
            "catalog": str(out_dir / "catalog.duckdb"),
        },
    )
    write_results(
        out_dir,
        results.runs,
        results.steps,
        results.attribution,
        results.gaps,
        results.provenance,
        results.timeline,
    )
    return out_dir


def _nsys_or_none(use_nsys: bool | None, say: Callable[[str], None]) -> str | None:
    if use_nsys is False:
        return None
    try:
        return find_nsys()
    except BubblelabError as e:
        if use_nsys:
            raise
        say(f"nsys not found ({e}); using the in-process timeline instead")
        return None


def _run_in_process(config: dict, cache: dict):
    """One model per spec and one engine per engine config for the whole sweep: loading and graph
    capture happen once, and every run still starts with its own warm-up and a fresh timeline."""
    from bubblelab.engine.config import EngineConfig
    from bubblelab.engine.driver import run_workload
    from bubblelab.engine.llm_engine import LLMEngine
    from bubblelab.engine.loader import load_model
    from bubblelab.engine.workload import WorkloadSpec

    e = config["engine"]
    model_key = (e["model"], e["device"], e["dtype"], e["seed"], e["attention_backend"])
    if model_key not in cache:
        cache[model_key] = load_model(
            e["model"],
            dtype=e["dtype"],
            device=e["device"],
            seed=e["seed"],
            attention_backend=e["attention_backend"],
        )
    engine_key = json.dumps(e, sort_keys=True)
    if engine_key not in cache:
        cache[engine_key] = LLMEngine(EngineConfig(**e), cache[model_key], timeline=Timeline())
    engine = cache[engine_key]
    engine.timeline = engine.phases.timeline = Timeline()
    return run_workload(engine, WorkloadSpec(**config["workload"]))


def _inprocess_command(spec: SweepSpec) -> list[str]:
    return (
        ["bubblelab", *sys.argv[1:]]
        if sys.argv and sys.argv[0].endswith("bubblelab")
        else ["run_sweep", repr(spec)]
    )


def _meta(summary: dict, config: dict, command: list[str], started: str) -> dict:
    return {
        "model": summary["model"],
        "preset": config["engine"]["model"],
        "depth": summary["depth"],
        "streams": summary["streams"],
        "output_len_mean": summary["output_len_mean"],
        "mean_generated_len": summary["mean_generated_len"],
        "requests": summary["requests"],
        "device": summary["device"],
        "driver": summary.get("driver"),
        "torch": summary.get("torch"),
        "command": " ".join(command),
        "started_at": started,
        "wall_s": summary["wall_s"],
        "generated_tokens": summary["generated_tokens"],
        "decode_steps": summary["decode_steps"],
    }
