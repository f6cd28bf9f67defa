"""What `bubblelab analyze` reports, as one library call: traces (or a run directory's catalog) in,
each run's steady-state breakdown and bubble attribution out, named by configuration, with what
pipelining would buy a foreign engine.

It spans profiling (ingest, profiling.overview.analyze) and the cost model
(costmodel.foreign.pipelining_gain), so it lives here; the CLI prints its answer, and the notebooks
and tools/ call it for the same numbers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb
import numpy as np

from ..core.checks import check_float, check_int
from ..core.errors import BubblelabError, OptionError
from ..core.files import check_output_path
from ..core.steady import WARMUP_STEPS
from ..costmodel.foreign import pipelining_gain
from ..costmodel.schedule import Limits, extra_steps
from ..costmodel.schedule import Request as Replayed
from ..profiling import analysis, foreign, overview
from ..profiling.catalog import connect
from ..profiling.ingest import DOMAIN, ingest_trace
from ..profiling.kernels import kernel_view
from ..profiling.steps import StepOptions
from .catalogs import update_catalog
from .sources import run_catalog
from .tables import config_names
from .traces import index_meta, unprofiled_period_ms

AS_FOREIGN = "none"  # a domain no trace has: every run is read as any engine's (--domain none)

if TYPE_CHECKING:  # the workload module reaches the engine's config, hence torch: not for a page
    from .workload import WorkloadSpec


def analyze_traces(
    inputs: Sequence[Path | str] = (),
    *,
    catalog: Path | str | duckdb.DuckDBPyConnection | None = None,
    warmup: int = WARMUP_STEPS,
    domain: str = DOMAIN,
    steps: StepOptions | None = None,
    output_len: float | None = None,
    step_ms: float | None = None,
    zombies: bool = True,
    mean_step_ms: float | None = None,
    workload: WorkloadSpec | None = None,
    kernels: bool = False,
    on_progress: Callable[[str], None] | None = None,
) -> dict:
    """profiling.overview.analyze of the runs of `inputs`, every run named (`name`, e.g.
    `qwen3-0.6b·s32·d1·r0`) and a foreign run's `pipelining` predicted (or `not_predicted`, why).

    inputs: nsys exports (.sqlite, .sqlite.gz, .nsys-rep; an index.json beside one, or the results
    of the sweep that left it in its traces/, gives its run metadata), added to `catalog` (a DuckDB
    file, updated whole or not at all; an open catalog, to ask profiling.analysis more afterwards;
    default: in memory); none: every run already in `catalog`; or one run directory, read from the
    catalog its sweep left. steps: how to find a foreign engine's steps; output_len: its requests'
    mean generated length, for the zombie tax (default: its metadata's, else the trace's guess);
    step_ms: its own unprofiled time a decode step, which replaces the trace's in the prediction
    (one foreign run only); zombies: False where its requests stop at lengths it knows at launch;
    mean_step_ms: its own unprofiled mean step over a whole run, for the whole-run figure; workload:
    its shape (streams, requests, lengths), to replay the steps depth 2 adds
    (costmodel.foreign.pipelining_gain). kernels: each run adds `kernels`, the kernel-level view
    (profiling.kernels.kernel_view: top kernels, CUDA API summary, launch latency, whole-run split).
    on_progress: told what is being done, in words.
    """
    paths = [Path(p) for p in inputs]
    if not paths and catalog is None:
        raise BubblelabError("give one or more traces, or --catalog PATH")
    run_dir = next((p for p in paths if p.is_dir()), None)
    if run_dir is not None and (len(paths) > 1 or catalog is not None):
        raise BubblelabError(f"{run_dir} is a run directory: analyse it alone, without --catalog")
    check_int("warmup", warmup, 0, 10**6)
    if not isinstance(domain, str) or not domain.strip():
        raise OptionError("domain", "must name an NVTX domain", domain)
    if twice := next((p for i, p in enumerate(paths) if p.resolve() in
                      {q.resolve() for q in paths[:i]}), None):  # fmt: skip
        raise BubblelabError(f"{twice} is given twice: each trace is one run")
    if paths and isinstance(catalog, (str, Path)):  # refused before the analysis, not after it
        check_output_path(Path(catalog), "--catalog")
    if output_len is not None:  # checked here: pipelining_gain's refusals are per run
        check_float("output_len", output_len, 1, 1e6)
    if step_ms is not None:
        check_float("step_ms", step_ms, 1e-6, 1e9)
    if mean_step_ms is not None:
        check_float("mean_step_ms", mean_step_ms, 1e-6, 1e9)
    say = on_progress or (lambda _: None)
    extra = 0.0 if workload is None else replayed_extra_steps(workload)

    def work(con: duckdb.DuckDBPyConnection) -> dict:
        run_ids = []
        for i, trace in enumerate([] if run_dir else paths):
            say(f"ingesting {i + 1}/{len(paths)}: {trace.name}")
            meta = index_meta(trace)  # the committed traces' model, streams, depth
            run_ids += ingest_trace(trace, None, meta, domain=domain, steps=steps, con=con)
        say("analysing")
        report = overview.analyze(con, run_ids or None, warmup, output_len)
        files = dict(con.execute("SELECT run_id, trace_path FROM runs").fetchall())
        for run in report["runs"]:  # where each run came from: its name (_name_runs) says it
            run["trace_path"] = files.get(run["run_id"])
        foreign_runs = [run for run in report["runs"] if "syncs_per_step" in run]
        for name, given in (("step_ms", step_ms), ("mean_step_ms", mean_step_ms)):
            if given is not None and len(foreign_runs) != 1:
                n = len(foreign_runs)
                raise OptionError(name, f"needs exactly one foreign run, there are {n}", given)
        for run in foreign_runs:
            run["pipelining"] = _pipelining(
                con, run, output_len, warmup, step_ms, zombies, mean_step_ms, extra
            )
        for run in report["runs"]:
            if kernels:
                run["kernels"] = kernel_view(con, run["run_id"])
        if not report["runs"]:
            raise BubblelabError(f"{catalog} holds no runs: give traces to add")
        if warmup and not any(run["steps"] for run in report["runs"]):  # before the catalog is kept
            raise OptionError("warmup", "leaves no steady-state step in any run", warmup)
        return report

    if isinstance(catalog, duckdb.DuckDBPyConnection):
        report = work(catalog)
    elif run_dir is not None:
        con = run_catalog(run_dir)
        try:
            report = work(con)
        finally:
            con.close()
    else:
        report = update_catalog(None if catalog is None else Path(catalog), work)
    _name_runs(report)
    return report


def trace_forecasts(con: duckdb.DuckDBPyConnection, run_ids: list[str]) -> dict[str, dict]:
    """run_id -> what pipelining would buy each foreign run of `run_ids` (costmodel.foreign's
    pipelining_gain, or `not_predicted` and why): `bubblelab analyze TRACE`'s figures with its
    default options, for the report's page of a trace."""
    if not run_ids:
        return {}
    report = overview.analyze(con, run_ids, WARMUP_STEPS, None)
    return {
        run["run_id"]: _pipelining(con, run, None, WARMUP_STEPS)
        for run in report["runs"]
        if "syncs_per_step" in run
    }


def blocking_forecast(trace: Path | str) -> tuple[dict, bool] | None:
    """What pipelining would buy the blocking run of our own engine that `trace` holds, from the
    trace alone, and whether the steps it stands on are sure: `bubblelab analyze TRACE --domain
    none`'s figures (our NVTX phases name the loop's parts but forecast nothing; read as any
    engine's, its syncs and launches do). None for a trace of several processes. The gain's
    `steps_unsure`: why its steps are not sure (None where they are)."""
    con = connect(None)
    try:
        trace = Path(trace)
        run_ids = ingest_trace(trace, None, index_meta(trace), domain=AS_FOREIGN, con=con)
        if len(run_ids) != 1:
            return None
        (run,) = overview.analyze(con, run_ids, WARMUP_STEPS, None)["runs"]
        found = run["steps_found"]
        gain = _pipelining(con, run, None, WARMUP_STEPS) | {"steps_unsure": found["unsure"]}
        return gain, found["confidence"] == "high"
    finally:
        con.close()


def checked_forecast(
    blocking: Path | str, pipelined: Path | str, found: tuple[dict, bool] | None = None
) -> dict | None:
    """A blocking nsys trace of our engine's configuration (blocking_forecast) against a pipelined
    trace of the same one: the pipelined step the first alone foresees against the second's median
    steady period, and the speedup a steady step each gives with the first's T_block and zombie tax
    z, as pairs [foreseen, measured]. The pipelined trace is read as the forecast reads the
    blocking one, as any engine's trace: our NVTX steps cut elsewhere (the same steps, their periods
    summing to the same time within 0.02%), and where the period varies widely from step to step
    the cut moves the median: 1.2% on the committed 1-stream depth-1 trace (2.160 against 2.185 ms,
    one standard error of the median), which would pass for a 1.8-point miss. Both under nsys,
    which inflates them alike. None
    where either trace gives no figure. found: blocking_forecast(blocking), if the caller has it.
    `unsure`: why either trace's steps are not sure ("A: ...; B: ..."), None where both are.
    `gpu_ms`: the GPU's work a step, [A's, which the forecast keeps, B's]: where pipelining changed
    it (a GPU kept busy that reaches its power limit lowers its clock), the miss is there.
    Where both traces' index.json give their configuration's unprofiled period, `unprofiled_ms`
    and `unprofiled_pct` say what the engine without nsys gained (the committed H200 traces: +6.0%
    at 1 stream, +10.0% at 32, against +41.1% and +36.4% under nsys)."""
    found = found or blocking_forecast(blocking)
    measured = blocking_forecast(pipelined)
    if found is None or measured is None or "t_pipe_ms" not in found[0]:
        return None
    gain, sure = found
    block, pipe, z = gain["t_block_ms"], measured[0]["t_block_ms"], gain["z"]
    why = [
        f"{side}: {g.get('steps_unsure') or 'not sure of its steps'}"
        for side, (g, ok) in (("A", found), ("B", measured))
        if not ok
    ]
    out = {
        "sure": sure and measured[1], "unsure": "; ".join(why) or None, "z": z,
        "z_source": gain.get("output_len_source"), "t_block_ms": block,
        "pipelined_ms": [gain["t_pipe_ms"], pipe],
        "speedup_pct": [gain["speedup_pct"], 100 * (block / pipe * (1 - z) - 1)],
        "interval_pct": list(gain["interval_pct"]),
        "gpu_ms": [gain["gpu_ms"], measured[0]["gpu_ms"]],
    }  # fmt: skip
    plain_block, plain_pipe = unprofiled_period_ms(blocking), unprofiled_period_ms(pipelined)
    if plain_block is not None and plain_pipe is not None:
        out["unprofiled_ms"] = [plain_block, plain_pipe]
        out["unprofiled_pct"] = 100 * (plain_block / plain_pipe * (1 - z) - 1)
    return out


def bound_words(gain: dict) -> str:
    """How far a foreign run's figure holds, said before it: nothing where nsys timed its host as
    it runs, else 'upper bound' or 'not sure', for graphs it traced node by node."""
    if "graph_launch_ms" not in gain:
        return ""
    mark = "upper bound" if gain.get("bound") == "upper" else "not sure"
    return f"{mark} (the profiled engine's: graphs traced {gain['graph_trace']}-level): "


def _pipelining(
    con: duckdb.DuckDBPyConnection,
    run: dict,
    output_len: float | None,
    warmup: int,
    step_ms: float | None = None,
    zombies: bool = True,
    mean_step_ms: float | None = None,
    extra: float = 0.0,
) -> dict:
    """What pipelining would buy a foreign run, with its mid-step host syncs and the host time nsys
    added to node-traced graph launches named among the assumptions; the reason where it cannot be
    predicted. Without output_len, L is the requests' mean generated length where the run's
    metadata has it (ours: an index.json beside the trace, or its sweep's results), else the
    trace's guess (costmodel.foreign_zombies)."""
    known_from = "given"
    if output_len is None:
        row = con.execute(
            "SELECT mean_generated_len FROM runs WHERE run_id = ?", [run["run_id"]]
        ).fetchone()
        recorded = row[0] if row else None
        if recorded is not None and recorded >= 1:
            output_len, known_from = float(recorded), "recorded with the trace"
    flagged = [r for r in run["syncs_per_step"] if r["flagged"] and r["event"] == "sync"]
    syncs = "; ".join(f"{r['per_step']:.3g} x {r['api']} a step" for r in flagged) or None
    try:
        steps = analysis.per_step(con, run["run_id"])
        return pipelining_gain(
            steps,
            output_len=output_len,
            extra_syncs=syncs,
            graph_launches=foreign.traced_graph_launches(con, run["run_id"]),
            warmup=warmup,
            step_ms=step_ms,
            zombies=zombies,
            mean_step_ms=mean_step_ms,
            extra_steps=extra,
            launch_gaps=foreign.launch_handovers(con, run["run_id"], steps),
            known_from=known_from,
        )
    except BubblelabError as e:
        return {"not_predicted": str(e)}


def replayed_extra_steps(workload: WorkloadSpec, seeds: int = 4) -> float:
    """How many more steps depth 2 takes than depth 1 on a closed-loop workload of this shape, as a
    share: its requests replayed through the pipelined loop (costmodel.schedule.extra_steps), every
    request stopping at its cap, the batch as wide as the streams; the mean over a few draws of
    the lengths, since a trace's own draw is not known."""
    from .workload import output_lengths

    if workload.arrival_rate is not None:
        raise OptionError("workload", "the replay needs a closed loop (no arrival rate)", workload)
    shares = []
    for seed in range(workload.seed, workload.seed + seeds):
        lengths = output_lengths(workload, np.random.default_rng(seed))
        requests = [Replayed(workload.prompt_len, int(n), int(n)) for n in lengths]
        limits = Limits(workload.streams, max_model_len=workload.prompt_len + int(max(lengths)) + 1)
        shares.append(extra_steps(requests, workload.streams, limits))
    return float(np.mean(shares))


def _name_runs(report: dict) -> None:
    """Each run, and each tensor-parallel run, named by its configuration (a worker rank's run
    after its rank 0)."""
    ranks = {
        r["rank_run_id"]: (tp["run_id"], r["rank"])
        for tp in report["tensor_parallel"]
        for r in tp["per_rank"]
    }
    names = config_names(report["runs"], ranks)
    for run in report["runs"]:
        run["name"] = names[run["run_id"]]
    for tp in report["tensor_parallel"]:
        tp["name"] = names.get(tp["run_id"], tp["run_id"])
