"""How long does `bubblelab analyze` take on a trace with a million kernels, for each way of finding
the steps?

Builds a scaled-up copy of a seed trace by replaying its events back to back until it holds at least
--kernels kernels (the SQL in benchmarks/sql/), then, per mode and repeat, in a fresh in-memory
catalog as `bubblelab analyze TRACE` uses: ingestion, the per-step table, steady state, the
attribution (both splits), the idle histogram, the sync inventory, the kernel summary, the
kernel-level view of `analyze --kernels` (profiling.kernels: top kernels, CUDA API summary, launch
latency, whole-run split), `overview.analyze` and, for another engine's trace, the pipelining
prediction. Wall and CPU seconds
(CPU time, DuckDB's threads included, is what other jobs on the cores disturb least). Modes:

    bubblelab  our NVTX ranges (an engine-shaped depth-2 seed: 400 kernels a step, the probe's
               tables)
    nvtx       --step-range on another engine's trace (testing.synthetic_engines: a prefill,
               then decode steps of one 400-node graph replay, 2 `.item()` syncs and a `.tolist()`
               a step, copies, memsets, two streams, OS calls, one NVTX range a step)
    graph      --step-rule graph on that trace
    sync       --step-rule sync on that trace
    auto       no option on that trace: every rule tried, the evidence picks one (sync)
    eager      no option on a trace of 400 eager launches a step, each in a framework NVTX range

Usage (--source: any nsys export to scale up instead of the seeds):

    .venv/bin/python -m benchmarks.analyze_1m_kernels [--modes bubblelab,nvtx,graph,sync,auto,eager]
        [--repeats 3] [--kernels 1000000] [--source TRACE] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import duckdb

from benchmarks.analyze_seeds import engine_shaped_seed, foreign_seed
from bubblelab.core.files import write_atomic
from bubblelab.costmodel.foreign import pipelining_gain
from bubblelab.profiling import analysis, kernels, overview
from bubblelab.profiling import foreign as foreign_rules
from bubblelab.profiling.catalog import OFFLINE, connect, load_sqlite_extension, sql_string
from bubblelab.profiling.ingest import ingest
from bubblelab.profiling.steps import StepOptions
from bubblelab.runs.machine import cpu_facts, git_facts

SQL = Path(__file__).parent / "sql"
EVENT_TABLES = {  # table -> how its copies shift (benchmarks/sql/replay_*.sql)
    "NVTX_EVENTS": "replay_nvtx",
    "CUPTI_ACTIVITY_KIND_RUNTIME": "replay_correlated",
    "CUPTI_ACTIVITY_KIND_KERNEL": "replay_correlated",
    "CUPTI_ACTIVITY_KIND_MEMCPY": "replay_correlated",
    "CUPTI_ACTIVITY_KIND_MEMSET": "replay_correlated",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": "replay_correlated",
    "OSRT_API": "replay_timed",
}
COPIED_ONCE = (
    "META_DATA_EXPORT",
    "StringIds",
    "TARGET_INFO_GPU",
    "TARGET_INFO_SESSION_START_TIME",
    "TARGET_INFO_SYSTEM_ENV",
)
SIZES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS")
MODES: dict[str, tuple[str, StepOptions]] = {  # mode -> (seed, how the steps are found)
    "bubblelab": ("ours", StepOptions()),
    "nvtx": ("graph", StepOptions(step_range="^LLMEngine")),
    "graph": ("graph", StepOptions(rule="graph")),
    "sync": ("graph", StepOptions(rule="sync")),
    "auto": ("graph", StepOptions()),
    "eager": ("eager", StepOptions()),
}


def sql(name: str, **identifiers: str) -> str:
    """benchmarks/sql/<name>.sql with its {table} placeholder filled (a name of EVENT_TABLES,
    COPIED_ONCE or SIZES: identifiers cannot be parameters)."""
    assert all(v in {*EVENT_TABLES, *COPIED_ONCE, *SIZES} for v in identifiers.values())
    return (SQL / f"{name}.sql").read_text().format(**identifiers)


def scale_up(source: Path, target: Path, kernels: int) -> int:
    """Replay `source`'s events back to back into `target` until it has >= `kernels` kernels;
    returns the number of copies."""
    con = duckdb.connect(config=OFFLINE)
    load_sqlite_extension(con)
    con.execute(f"ATTACH {sql_string(str(source))} AS src (TYPE sqlite, READ_ONLY)")
    con.execute(f"ATTACH {sql_string(str(target))} AS dst (TYPE sqlite)")
    tables = {
        name
        for (name,) in con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = 'src'"
        ).fetchall()
    }
    events = [t for t in EVENT_TABLES if t in tables]
    extents = [_row(con, sql("table_extent", table=t)) for t in events]
    first, last = min(e[0] for e in extents), max(e[1] for e in extents)
    max_corr, max_step, per_copy = _row(con, sql("source_sizes"))
    copies = -(-kernels // per_copy)
    params = {"span": last - first + 1000, "corr": max_corr + 1, "steps": max_step + 1}
    for table in sorted(tables & set(COPIED_ONCE)):
        con.execute(sql("copy_table", table=table))
    for table in events:
        statement = sql(EVENT_TABLES[table], table=table)
        used = {k: v for k, v in {**params, "copies": copies}.items() if f"${k}" in statement}
        con.execute(statement, used)
    con.close()
    return copies


def _row(con: duckdb.DuckDBPyConnection, query: str) -> tuple:
    row = con.execute(query).fetchone()
    assert row is not None, query
    return row


def cpu_s() -> float:
    """CPU seconds of this process, DuckDB's threads included."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def timed(label: str, fn: Callable, times: dict):
    t0, c0 = time.perf_counter(), cpu_s()
    value = fn()
    times[label] = [round(time.perf_counter() - t0, 3), round(cpu_s() - c0, 3)]
    return value


def one_pass(trace: Path, options: StepOptions, foreign: bool) -> tuple[dict, int, int]:
    """Everything `bubblelab analyze TRACE` does, timed by stage: {stage: [wall s, CPU s]}."""
    times: dict[str, list[float]] = {}
    con = connect(None)
    run = timed("ingest", lambda: ingest(trace, None, {}, steps=options, con=con), times)
    steps = timed("per_step", lambda: analysis.per_step(con, run), times)
    steady = timed("steady_state", lambda: analysis.steady_state(steps), times)
    timed("attribution", lambda: analysis.attribution(con, run, steady), times)  # both splits
    timed("idle_histogram", lambda: analysis.idle_histogram(con, run, steady), times)
    timed("sync_inventory", lambda: analysis.sync_inventory(con, run), times)
    timed("kernel_summary", lambda: analysis.kernel_summary(con, run), times)
    timed("top_kernels", lambda: kernels.top_kernels(con, run), times)  # analyze --kernels
    timed("cuda_api_summary", lambda: kernels.cuda_api_summary(con, run), times)
    timed("launch_latency", lambda: kernels.launch_latency(con, run), times)
    timed("run_split", lambda: kernels.run_split(con, run), times)
    timed("analyze", lambda: overview.analyze(con, [run]), times)
    if foreign:
        gaps = timed(
            "launch_handovers", lambda: foreign_rules.launch_handovers(con, run, steps), times
        )
        timed("pipelining", lambda: pipelining_gain(steps, launch_gaps=gaps), times)
    con.close()
    return times, len(steps), len(steady)


def spread(values: list[float]) -> dict:
    return {"median": round(statistics.median(values), 3), "min": min(values), "max": max(values)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--modes", default=",".join(MODES), help="comma-separated, of: " + ", ".join(MODES)
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--kernels", type=int, default=1_000_000)
    parser.add_argument("--source", type=Path, help="an nsys SQLite export to scale up")
    parser.add_argument("--json", type=Path, help="write the record here")
    args = parser.parse_args()
    modes = args.modes.split(",")
    if unknown := set(modes) - set(MODES):
        parser.error(f"unknown modes {sorted(unknown)}")
    record: dict = {
        "command": " ".join(["python -m benchmarks.analyze_1m_kernels", *sys.argv[1:]]),
        "machine": {
            **cpu_facts(),
            **git_facts(),
            "duckdb": duckdb.__version__,
            "python": sys.version.split()[0],
        },  # fmt: skip
        "repeats": args.repeats,
        "modes": {},
    }
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        built: dict[str, dict] = {}
        for mode in modes:
            seed, options = MODES[mode]
            if seed not in built:
                built[seed] = build(seed, args.source, tmp, args.kernels)
            trace = built[seed]
            passes, loads = [], []
            for _ in range(args.repeats):
                loads.append(os.getloadavg()[0])
                times, n_steps, n_steady = one_pass(trace["path"], options, seed != "ours")
                passes.append(times)
                total = [sum(t[i] for t in times.values()) for i in (0, 1)]
                print(
                    f"{mode:9} {total[0]:6.2f} s wall, {total[1]:6.2f} s CPU "
                    f"(ingest {times['ingest'][0]:.2f} s; load {loads[-1]:.1f})",
                    flush=True,
                )
            record["modes"][mode] = {
                "trace": {k: v for k, v in trace.items() if k != "path"},
                "steps": n_steps,
                "steady_steps": n_steady,
                "load_average_1min": loads,
                "passes": passes,
                "total_wall_s": spread([sum(t[0] for t in p.values()) for p in passes]),
                "total_cpu_s": spread([sum(t[1] for t in p.values()) for p in passes]),
                "ingest_wall_s": spread([p["ingest"][0] for p in passes]),
            }
    print(table(record))
    if args.json:
        write_atomic(args.json, json.dumps(record, indent=1) + "\n")


def build(seed: str, source: Path | None, tmp: Path, kernels: int) -> dict:
    """Scale up the seed (or --source) and say how big it got."""
    t0 = time.perf_counter()
    if source:
        start = source
    elif seed == "ours":
        start = engine_shaped_seed(tmp / f"seed-{seed}.sqlite")
    else:
        start = foreign_seed(tmp / f"seed-{seed}.sqlite", eager=seed == "eager")
    big = tmp / f"big-{seed}.sqlite"
    copies = scale_up(start, big, kernels)
    con = duckdb.connect(config=OFFLINE)
    load_sqlite_extension(con)
    con.execute(f"ATTACH {sql_string(str(big))} AS big (TYPE sqlite, READ_ONLY)")
    sizes = {t: _row(con, sql("table_rows", table=t))[0] for t in SIZES}
    con.close()
    facts = {
        "path": big,
        "seed": str(source) if source else seed,
        "copies": copies,
        "kernels": sizes["CUPTI_ACTIVITY_KIND_KERNEL"],
        "cuda_calls": sizes["CUPTI_ACTIVITY_KIND_RUNTIME"],
        "nvtx_events": sizes["NVTX_EVENTS"],
        "mib": round(big.stat().st_size / 2**20),
    }
    print(f"built {seed} x{copies} in {time.perf_counter() - t0:.1f} s: {facts['kernels']:,} "
          f"kernels, {facts['cuda_calls']:,} CUDA calls, {facts['nvtx_events']:,} NVTX events, "
          f"{facts['mib']} MiB", flush=True)  # fmt: skip
    return facts


def table(record: dict) -> str:
    """The record as the markdown table of benchmarks/README.md."""
    lines = [
        "| mode | trace | steps (steady) | ingest | total wall: median (min-max) | total CPU "
        "| load |",
        "|---|---|---|---|---|---|---|",
    ]
    for mode, r in record["modes"].items():
        t, w, c = r["trace"], r["total_wall_s"], r["total_cpu_s"]
        load = r["load_average_1min"]
        lines.append(
            f"| {mode} | {t['kernels']:,} kernels, {t['cuda_calls']:,} calls, "
            f"{t['nvtx_events']:,} NVTX | {r['steps']:,} ({r['steady_steps']:,}) "
            f"| {r['ingest_wall_s']['median']:.2f} s | **{w['median']:.2f} s** "
            f"({w['min']:.2f}-{w['max']:.2f}) | {c['median']:.2f} s "
            f"({c['min']:.2f}-{c['max']:.2f}) | {min(load):.1f}-{max(load):.1f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
