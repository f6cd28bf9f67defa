"""How long does the analysis take on a trace with a million kernels?

Builds a scaled-up copy of a trace (by default an engine-shaped synthetic export: depth-2 decode
steps of 400 kernels each, written with the real probe's tables and columns; or `--source` any nsys
export of the engine) by replaying its events back to back until it holds at least --kernels
kernels, then times ingestion and every query on it, in wall and CPU seconds (CPU time is what
other jobs on the cores disturb least). `--mode` picks how the steps are found: bubblelab (our
ranges), or for another engine's trace (bubblelab.synthetic_engines; --source works too): sync (the
host sync closing each step; a decode graph of 400 nodes, 2 extra syncs a step), nvtx
(--step-range on the same trace), graph (--step-rule graph), eager (400 eager kernels a step, each
in a framework NVTX range). Usage:

    .venv/bin/python -m benchmarks.analyze_1m_kernels [--mode MODE] [--source TRACE] [--kernels N]
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

import duckdb

from bubblelab.profiling import analysis
from bubblelab.profiling.catalog import OFFLINE, connect, load_sqlite_extension, sql_string
from bubblelab.profiling.ingest import ingest
from bubblelab.profiling.steps import StepOptions
from bubblelab.synthetic_engines import Engine, engine_trace
from bubblelab.synthetic_trace import COPY, DTOH, HTOD, TraceBuilder

EVENT_TABLES = (
    "NVTX_EVENTS",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
    "OSRT_API",
)
MODES = ("bubblelab", "sync", "nvtx", "graph", "eager")
COPIED_ONCE = (
    "META_DATA_EXPORT",
    "StringIds",
    "TARGET_INFO_GPU",
    "TARGET_INFO_SESSION_START_TIME",
    "TARGET_INFO_SYSTEM_ENV",
)


def engine_shaped_seed(path: Path, steps: int = 8, kernels_per_forward: int = 400) -> Path:
    """A depth-2 run: per step plan, launch > copy_h2d, forward (400 kernels), commit > wait,
    finalize."""
    b = TraceBuilder()
    tick = 4.0 * kernels_per_forward + 100  # us: 4 us kernels, the GPU always a bit behind
    for k in range(steps + 1):
        t = 1000 + tick * k
        if k < steps:
            b.range("plan", k, t, t + 20)
            b.range("launch", k, t + 20, t + 20 + 3 * kernels_per_forward + 30)
            b.mark(k, "kind=decode bs=8 tokens=8 depth=2", t + 20)
            b.range("copy_h2d", k, t + 22, t + 28)
            b.memcpy(t + 24, t + 60, t + 62, HTOD)
            b.range("forward", k, t + 30, t + 30 + 3 * kernels_per_forward + 10)
            for i in range(kernels_per_forward):
                b.kernel(
                    f"layer_kernel_{i % 12}", t + 32 + 3 * i, t + 62 + 4 * i, t + 62 + 4 * i + 3.6
                )
        if k > 0:
            base = t + 3 * kernels_per_forward + 60
            b.range("commit", k - 1, base, base + 30)
            b.range("wait", k - 1, base + 2, base + 10)
            b.sync("cudaEventSynchronize_v3020", base + 3, base + 9, sync_type=1)
        if k < steps:
            base = t + 3 * kernels_per_forward + 95
            b.range("finalize", k, base, base + 4)
            b.range("sampling", k, base, base + 2)
            b.kernel(
                "argmax",
                base + 1,
                t + 62 + 4 * kernels_per_forward,
                t + 64 + 4 * kernels_per_forward,
            )
            b.range("copy_d2h", k, base + 2, base + 4)
            b.memcpy(
                base + 3,
                t + 64 + 4 * kernels_per_forward,
                t + 65 + 4 * kernels_per_forward,
                DTOH,
                stream=COPY,
            )
    return b.write(path)


def foreign_seed(path: Path, eager: bool) -> Path:
    """Another engine's trace: a prefill, then decode steps of 400 kernels (one node-traced graph
    replay, or 400 eager launches each in a framework NVTX range), driver-API launches, two streams,
    copies, memsets, OS calls, 2 `.item()` syncs and a `.tolist()` a step, one NVTX range per
    step."""
    b = TraceBuilder()
    engine = Engine(
        steps=8,
        nodes=400,
        graph=not eager,
        extra_syncs=2,
        step_range="LLMEngine.step",
        node_us=4.0,
        bookkeeping_us=300.0,
    )
    engine_trace(b, engine)
    return b.write(path, our_domain=False)


def one_row(con: duckdb.DuckDBPyConnection, sql: str) -> tuple:
    """The row of a query that always returns exactly one (an aggregate)."""
    row = con.execute(sql).fetchone()
    assert row is not None, sql
    return row


def scale_up(source: Path, target: Path, kernels: int) -> int:
    """Replay `source`'s events back to back into `target` until it has >= `kernels` kernels;
    returns copies."""
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
    spans = " UNION ALL ".join(
        f'SELECT min(start), max(COALESCE("end", start)) FROM src."{t}"' for t in events
    )
    first, last = one_row(con, f"SELECT min(a), max(b) FROM ({spans}) AS spans(a, b)")
    (max_corr,) = one_row(con, "SELECT max(correlationId) FROM src.CUPTI_ACTIVITY_KIND_RUNTIME")
    max_step = one_row(con, "SELECT max(int64Value) FROM src.NVTX_EVENTS")[0] or 0
    (per_copy,) = one_row(con, "SELECT count(*) FROM src.CUPTI_ACTIVITY_KIND_KERNEL")
    copies = -(-kernels // per_copy)
    span, corr, steps = last - first + 1000, max_corr + 1, max_step + 1  # integers, inlined below
    shifts = {
        "start": f"start + i * {span}",
        "end": f'"end" + i * {span}',
        "correlationId": f"correlationId + i * {corr}",
        "int64Value": f"int64Value + i * {steps}",
    }
    for table in sorted(tables & {*events, *COPIED_ONCE}):
        columns = [
            c
            for (c,) in con.execute(
                "SELECT column_name FROM duckdb_columns() "
                "WHERE database_name = 'src' AND table_name = ? ORDER BY column_index",
                [table],
            ).fetchall()
        ]
        if table in COPIED_ONCE:
            names = ", ".join(map(_quote, columns))
            con.execute(f'CREATE TABLE dst."{table}" AS SELECT {names} FROM src."{table}"')
            continue
        select = ", ".join(
            f"{shifts[c]} AS {_quote(c)}" if c in shifts else _quote(c) for c in columns
        )
        # NVTX_EVENTS: the domain is created once, not per copy
        once = "WHERE i = 0 OR eventType <> 75" if table == "NVTX_EVENTS" else ""
        con.execute(
            f'CREATE TABLE dst."{table}" AS SELECT {select} '
            f'FROM src."{table}", range({copies}) r(i) {once} ORDER BY start'
        )
    con.close()
    return copies


def _quote(column: str) -> str:
    return f'"{column}"'


def cpu_s() -> float:
    """CPU seconds of this process, DuckDB's threads included."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def timed(label: str, fn, results: dict, cpu: dict):
    t0, c0 = time.perf_counter(), cpu_s()
    value = fn()
    results[label], cpu[label] = time.perf_counter() - t0, cpu_s() - c0
    print(f"  {label:<16} {results[label]:6.2f} s  (cpu {cpu[label]:6.2f} s)")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--source", type=Path, help="an nsys SQLite export of the engine (default: synthetic)"
    )
    parser.add_argument("--kernels", type=int, default=1_000_000)
    parser.add_argument("--mode", choices=MODES, default="bubblelab")
    args = parser.parse_args()
    options = {
        "nvtx": StepOptions(step_range="^LLMEngine"),
        "graph": StepOptions(rule="graph"),
    }.get(args.mode, StepOptions())
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        if args.source:
            source = args.source
        elif args.mode == "bubblelab":
            source = engine_shaped_seed(tmp / "seed.sqlite")
        else:
            source = foreign_seed(tmp / "seed.sqlite", eager=args.mode == "eager")
        t0 = time.perf_counter()
        copies = scale_up(source, tmp / "big.sqlite", args.kernels)
        con = duckdb.connect(config=OFFLINE)
        load_sqlite_extension(con)
        con.execute(f"ATTACH {sql_string(str(tmp / 'big.sqlite'))} AS big (TYPE sqlite, READ_ONLY)")
        sizes = {
            t: one_row(con, f"SELECT count(*) FROM big.{t}")[0]
            for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS")
        }
        con.close()
        print(
            f"scaled {source.name} x{copies} in {time.perf_counter() - t0:.1f} s: "
            f"{sizes['CUPTI_ACTIVITY_KIND_KERNEL']:,} kernels, "
            f"{sizes['CUPTI_ACTIVITY_KIND_RUNTIME']:,} CUDA calls, "
            f"{sizes['NVTX_EVENTS']:,} NVTX events, "
            f"{(tmp / 'big.sqlite').stat().st_size / 2**20:.0f} MiB"
        )
        results: dict[str, float] = {}
        cpu: dict[str, float] = {}
        catalog = connect(tmp / "catalog.duckdb")
        big = tmp / "big.sqlite"
        run = timed(
            "ingest", lambda: ingest(big, None, {}, steps=options, con=catalog), results, cpu
        )
        steps = timed("per_step", lambda: analysis.per_step(catalog, run), results, cpu)
        steady = timed("steady_state", lambda: analysis.steady_state(steps), results, cpu)
        timed("attribution", lambda: analysis.attribution(catalog, run, steady), results, cpu)
        timed("by_time", lambda: analysis.attribution_by_time(catalog, run, steady), results, cpu)
        timed("idle_histogram", lambda: analysis.idle_histogram(catalog, run, steady), results, cpu)
        timed("sync_inventory", lambda: analysis.sync_inventory(catalog, run), results, cpu)
        timed("kernel_summary", lambda: analysis.kernel_summary(catalog, run), results, cpu)
        # what `bubblelab analyze` adds: every run's digest (steps found, idle gaps, syncs per step)
        timed("analyze", lambda: analysis.analyze(catalog, [run]), results, cpu)
        print(
            f"  {'total':<16} {sum(results.values()):6.2f} s  (cpu {sum(cpu.values()):6.2f} s; "
            f"{len(steps):,} steps, {len(steady):,} steady)"
        )


if __name__ == "__main__":
    main()
