"""A sweep directory's derived files, from what its passes wrote: catalog.duckdb (timeline.duckdb
beside it under nsys) and results.json, each built whole under a temporary name and renamed.

run_sweep assembles after its last run; `bubblelab report` assembles a sweep that was interrupted
or failed (strict=False), so the report shows every run that finished.
"""

from __future__ import annotations

import time
from pathlib import Path

import duckdb
import pandas as pd

from ..core.errors import BubblelabError
from ..core.files import write_atomic
from ..core.words import counted
from ..profiling import analysis, ranks
from ..profiling.catalog import connect, copy_catalog, map_cursors
from ..profiling.ingest import ingest_timeline, ingest_trace
from ..profiling.nsys import nsys_version
from . import state as run_state
from .machine import machine_facts
from .record import rank_timelines_from_record, read_record, timeline_from_record
from .repeats import read_verdicts
from .rundir import load_document, results_path, write_results
from .tables import collect

PASSES = ("plain", "nsys")


def needs_assembly(run_dir: Path) -> bool:
    """A sweep directory whose results.json is missing or predates its last finished run."""
    if run_state.read_state(run_dir) is None:
        return False
    finished = run_state.finished_runs(run_dir)  # reads every record: once
    if not finished:
        return False
    path = results_path(run_dir)
    if path is None:
        return True
    try:
        return sorted(load_document(path)["provenance"]["finished_runs"]) != sorted(finished)
    except (BubblelabError, KeyError, TypeError):  # TypeError: not a list where one belongs
        return True


def nsys_reports(out_dir: Path) -> list[Path]:
    """The nsys pass's reports (traces/run.<n>.sqlite.gz, or .sqlite as sweeps kept them before),
    in the order their ranges ran."""
    found: dict[int, Path] = {}
    for pattern in ("run.*.sqlite", "run.*.sqlite.gz"):  # the gzipped one, when both are there
        found |= {int(p.name.split(".")[1]): p for p in (out_dir / "traces").glob(pattern)}
    return [found[n] for n in sorted(found)]


def assemble(out_dir: Path, strict: bool = True) -> Path:
    """Ingest what a sweep's passes left in out_dir (runs/<pass>/<tag>.json.gz,
    traces/run.<n>.sqlite) and write results.json. strict=False reads a sweep cut short: the runs
    that finished, and the nsys pass only if every one of its reports was written."""
    started = time.perf_counter()
    state = run_state.read_state(out_dir)
    if state is None:
        raise BubblelabError(f"{out_dir} holds no sweep (no {run_state.STATE_FILE})")
    passes = _readable_passes(out_dir, strict)
    if not any(runs for _, _, runs, _ in passes):
        raise BubblelabError(f"{out_dir} holds no finished run")
    timings_path = out_dir / "runs" / "timings.json"
    timings = run_state.read_json(timings_path) if timings_path.is_file() else {}
    found: dict[str, list] = {"run_ids": [], "extras": [], "requests": [], "finished": []}

    def build(catalog_path: Path) -> None:
        ingested = catalog_path.with_name("ingested.duckdb")  # in write_atomic's own folder
        catalog = connect(ingested)
        try:
            if any(plan["profile"] for _, plan, _, _ in passes):
                # The nsys pass's own timelines go beside the traces
                # (benchmarks/compare_nsys_timeline.py).
                write_atomic(
                    out_dir / "timeline.duckdb",
                    lambda path: _ingest_passes(
                        out_dir, state, passes, catalog, path, timings, found
                    ),
                )
            else:
                _ingest_passes(out_dir, state, passes, catalog, None, timings, found)
        finally:
            catalog.close()
        copy_catalog(ingested, catalog_path)  # ingest's free blocks left behind: 7% smaller

    catalog_path = write_atomic(out_dir / "catalog.duckdb", build)
    provenance = {
        "sweep": state["spec"], "command": state["command"], "timings": timings,
        "catalog": str(catalog_path), "machine": machine_facts(),
        "finished_runs": found["finished"],
        "missing_runs": [run for run in state["planned"] if run not in found["finished"]],
        "repeats": read_verdicts(out_dir / "runs" / "plain"),  # why each configuration stopped
    }  # fmt: skip
    con = connect(catalog_path)
    try:
        results = collect(con, found["run_ids"], provenance=provenance)
    finally:
        con.close()
    # Ingest, catalog and tables, timed (the results file's own writing is not: it holds this).
    results.provenance["timings"]["assemble"] = {"wall_s": time.perf_counter() - started}
    runs_table = results.runs.merge(pd.DataFrame(found["extras"]), on="run_id", how="left")
    requests = pd.concat(found["requests"], ignore_index=True)
    return write_results(
        out_dir, runs_table, results.steps, results.attribution, results.gaps,
        results.provenance, results.timeline, requests, results.ranks, results.rank_attribution,
    )  # fmt: skip


def _readable_passes(out_dir: Path, strict: bool) -> list[tuple[str, dict, list[dict], list]]:
    """(name, plan, runs with a record, the pass's reports) of each pass to ingest."""
    out, finished = [], run_state.finished_runs(out_dir)
    for name in PASSES:
        run_dir = out_dir / "runs" / name
        if not (run_dir / "plan.json").is_file():
            continue
        plan = run_state.read_json(run_dir / "plan.json")
        runs = [r for r in plan["runs"] if f"{name}/{r['tag']}" in finished]  # damaged: skipped
        traces = nsys_reports(out_dir) if plan["profile"] else []
        # The reports pair with the runs by position: the pass is read whole or not at all.
        whole = len(traces) == len(runs) == len(plan["runs"])
        if plan["profile"] and not whole:
            if strict:
                raise BubblelabError(
                    f"nsys wrote {counted(len(traces), 'report')} for "
                    f"{counted(len(plan['runs']), 'run')} "
                    f"({len(runs)} whole run records)"
                )
            continue
        out.append((name, plan, runs, traces))
    return out


def _ingest_passes(
    out_dir: Path,
    state: dict,
    passes: list,
    catalog: duckdb.DuckDBPyConnection,
    timeline_path: Path | None,
    timings: dict,
    found: dict[str, list],
) -> None:
    """Ingest every pass, side by side: each on a connection of its own (the nsys pass's traces
    are DuckDB's work, the unprofiled pass's records mostly Python's); runs listed in pass order."""

    each = map_cursors(
        catalog,
        lambda con, item: _ingest_pass(out_dir, state, item, con, timeline_path, timings),
        passes,
    )
    for ingested in each:
        for key, values in ingested.items():
            found[key] += values


def _ingest_pass(
    out_dir: Path,
    state: dict,
    item: tuple,
    catalog: duckdb.DuckDBPyConnection,
    timeline_path: Path | None,
    timings: dict,
) -> dict[str, list]:
    name, plan, runs, traces = item
    found: dict[str, list] = {"run_ids": [], "extras": [], "requests": [], "finished": []}
    spec = state["spec"]
    profiled = bool(plan["profile"])
    started = time.perf_counter()
    timelines = connect(timeline_path) if profiled and timeline_path else catalog
    try:
        for i, run in enumerate(runs):
            record = read_record(out_dir / "runs" / name, run["tag"])
            meta = _meta(record["summary"], plan, state["command"])
            run_id = ingest_timeline(
                timeline_from_record(record), timelines, {**meta, "rank": 0},
                run_id=f"{run['tag']}-{'nsys-' if profiled else ''}timeline",
            )  # fmt: skip
            for rank, timeline in enumerate(rank_timelines_from_record(record), 1):
                ingest_timeline(timeline, timelines, {**meta, "rank": rank},
                                run_id=ranks.rank_run_id(run_id, rank))  # fmt: skip
            if profiled:
                meta = {**meta, "nsys_version": nsys_version()}
                run_id = _ingest_trace(traces[i], record, meta, catalog)
            found["run_ids"].append(run_id)
            found["finished"].append(f"{name}/{run['tag']}")
            found["extras"].append(_extra(run_id, run, spec, plan, record["summary"]))
            found["requests"].append(pd.DataFrame(record["requests"]).assign(run_id=run_id))
    finally:
        if timelines is not catalog:
            timelines.close()
    worker = out_dir / "runs" / name / "worker.json"
    timings.setdefault(name, {}).update(
        run_state.read_json(worker) if worker.is_file() else {},
        ingest_s=time.perf_counter() - started,
    )
    for later in sorted((out_dir / "runs" / name).glob("process.*/worker.json")):
        key = f"{name}.{later.parent.name.removeprefix('process.')}"  # as runs.passes names it
        timings.setdefault(key, {}).update(run_state.read_json(later))
    return found


def _ingest_trace(trace: Path, record: dict, meta: dict, catalog) -> str:
    """Ingest one run's report, checking it is the run the worker recorded (the reports are matched
    to runs by their order). A tensor-parallel run's report holds every rank's process: each rank
    is a run of the catalog (profiling.ranks), and rank 0's stands for the run."""
    run_ids = ingest_trace(trace, None, meta, con=catalog)
    run_id = run_ids[0]
    if meta.get("tensor_parallel", 1) > 1 or len(run_ids) > 1:
        group = ranks.tp_groups(catalog, run_ids)
        if len(group) != meta.get("tensor_parallel", 1):
            raise BubblelabError(
                f"{trace.name} holds {len(group)} ranks of a tensor-parallel run in "
                f"{len(run_ids)} processes or GPUs, its run had {meta.get('tensor_parallel', 1)}"
            )
        run_id = str(group["run_id"].iloc[0])
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


def _meta(summary: dict, plan: dict, command: str) -> dict:
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
    return {**{k: summary.get(k) for k in keys}, "preset": plan["engine"]["model"],
            "tensor_parallel": plan["engine"].get("tensor_parallel", 1),
            "command": command}  # fmt: skip


# What each run's timed region met (runs.region), as run columns: why one repeat was slower.
TIMING_COLUMNS = (
    "compiles_in_run", "captures_in_run", "new_shapes_in_run", "gc_in_run", "gc_pause_ms_in_run",
    "reserved_growth_mb_in_run", "alloc_retries_in_run", "sm_clock_mhz_min", "step_ms_max",
    "slow_steps", "host_share", "warmup_s",
)  # fmt: skip
# The hand-over probe before the timed region (engine.handoff_probe; absent from older sweeps).
PROBE_COLUMNS = (
    "handoff_probe_ms",
    "handoff_probe_iqr_ms",
    "handoff_probe_n",
    "handoff_probe_dropped",
)


def _extra(run_id: str, run: dict, spec: dict, plan: dict, summary: dict) -> dict:
    """The run columns schema 2 adds beside the catalog's (bubblelab.runs.schema), and what the
    run's timed region met (TIMING_COLUMNS, timing_flags: absent from older sweeps)."""
    engine = plan["engine"]
    return dict(
        run_id=run_id, repeat=run["repeat"], process=summary.get("process", 1),
        profiled=bool(plan["profile"]),
        prompt_len=spec["prompt_len"], constraint=spec["constraint"],
        constrained_share=spec["constrained_share"], arrival_rate=spec.get("arrival_rate"),
        max_num_seqs=engine["max_num_seqs"],
        max_num_batched_tokens=engine["max_num_batched_tokens"],
        max_model_len=engine["max_model_len"], sm_clock_mhz=summary.get("sm_clock_mhz_median"),
        power_w=summary.get("power_w_median"),
        clock_anchor_us_max=summary.get("clock_anchor_us_max"),
        **{k: summary.get(k) for k in (*TIMING_COLUMNS, *PROBE_COLUMNS)},
        timing_flags="; ".join(summary.get("timing_flags") or []),
    )  # fmt: skip
