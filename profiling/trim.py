"""Trim an nsys SQLite export to a window of steps, or to the columns the analysis reads.

Committed traces must stay small: a window of a few hundred steps, and the tables the ingestion
queries (NVTX, kernels, copies, memsets, runtime calls, syncs, OS runtime calls) plus the small
metadata tables, verbatim. A trace of ours is cut by its NVTX step payloads (`trim`); any other by
the host windows of the steps profiling/steps.py finds in it (`trim_foreign`).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from ..core.contract import RUN_DOMAIN
from ..core.errors import BubblelabError
from ..core.files import map_files
from .steps import StepOptions

# Their rows start on the GPU, after the host launched them (a graph replay traced whole is one).
GPU_TABLES = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
)
TIMED_TABLES = (  # the CUDA calls first: the GPU tables keep the ops of the calls kept
    "NVTX_EVENTS",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    *GPU_TABLES,
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
    "OSRT_API",
)
WHOLE_TABLES = (
    "StringIds",
    "META_DATA_EXPORT",
    "META_DATA_CAPTURE",
    "TARGET_INFO_SESSION_START_TIME",
    "TARGET_INFO_GPU",
    "TARGET_INFO_CUDA_DEVICE",
    "TARGET_INFO_SYSTEM_ENV",
    "ThreadNames",
    "PROCESSES",
)


# Kernel columns that no query reads (launch configuration, registers, shared and local memory, the
# mangled name, the grid id): a sweep drops them from its exports, a third of a trace's size. nsys's
# own .nsys-rep (run-and-profile --keep-reports) keeps them for the Nsight GUI and `nsys stats`.
UNREAD_KERNEL_COLUMNS = frozenset(
    "mangledName launchType cacheConfig registersPerThread gridX gridY gridZ blockX blockY blockZ "
    "staticSharedMemory dynamicSharedMemory localMemoryPerThread localMemoryTotal gridId "
    "sharedMemoryExecuted sharedMemoryLimitConfig".split()
)


def slim_kernels(path: Path) -> Path:
    """Rewrite the export at path without the kernel columns no query reads (UNREAD_KERNEL_COLUMNS):
    every table, every row and every other column kept as it was."""
    path = Path(path)
    partial = path.with_name(path.name + ".slim")
    partial.unlink(missing_ok=True)
    out = sqlite3.connect(partial)
    out.execute("PRAGMA journal_mode = OFF")  # a new file, renamed over the old one when whole
    out.execute("ATTACH ? AS src", (f"file:{path}?mode=ro",))
    kernels = "CUPTI_ACTIVITY_KIND_KERNEL"
    schema = out.execute(
        "SELECT type, name, tbl_name, sql FROM src.sqlite_master WHERE sql IS NOT NULL"
        " AND name NOT LIKE 'sqlite_%' ORDER BY type != 'table'"  # tables, then indexes, views
    ).fetchall()
    for kind, name, table, sql in schema:
        if kind != "table":
            if table != kernels:  # an index on the kernels may name a dropped column
                out.execute(sql)
        elif name == kernels:
            info = out.execute(f'PRAGMA src.table_info("{name}")').fetchall()
            kept = [(c[1], c[2], c[3]) for c in info if c[1] not in UNREAD_KERNEL_COLUMNS]
            cols = ", ".join(f'"{n}"' for n, _, _ in kept)
            defs = ", ".join(f'"{n}" {t}' + (" NOT NULL" if nn else "") for n, t, nn in kept)
            out.execute(f'CREATE TABLE main."{name}" ({defs})')
            out.execute(f'INSERT INTO main."{name}" SELECT {cols} FROM src."{name}"')
        else:
            out.execute(sql)
            out.execute(f'INSERT INTO main."{name}" SELECT * FROM src."{name}"')
    out.commit()
    out.execute("DETACH src")
    out.close()
    partial.replace(path)
    return path


def step_window(
    db: sqlite3.Connection, first: int, last: int, domain: str = "bubblelab"
) -> tuple[int, int]:
    """Time span of our host ranges whose step payload lies in [first, last]."""
    row = db.execute(
        """
        SELECT min(e.start), max(e."end") FROM NVTX_EVENTS e
        JOIN NVTX_EVENTS d ON d.eventType = 75 AND d.domainId = e.domainId AND d.text = ?
        WHERE e.eventType = 59 AND COALESCE(e.int64Value, e.uint64Value) BETWEEN ? AND ?""",
        (domain, first, last),
    ).fetchone()
    if row is None or row[0] is None:
        raise BubblelabError(f"no {domain} ranges for steps {first}..{last} in the trace")
    return row


def trim(
    src: Path,
    dst: Path,
    first: int,
    last: int,
    domain: str = "bubblelab",
    slack_ns: int = 2_000_000,
) -> Path:
    """Write to dst the rows of src inside the steps' window (plus slack for the GPU lagging the
    host)."""
    db = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
    t0, t1 = step_window(db, first, last, domain)
    db.close()
    return trim_window(src, dst, t0, t1 + slack_ns, t1 + slack_ns)


def trim_foreign(
    src: Path,
    dst: Path,
    first: int,
    last: int,
    steps: StepOptions | None = None,
    slack_ns: int = 2_000_000,
) -> Path:
    """Write to dst the rows of a foreign trace inside the host windows of its steps first..last
    (found by profiling/steps.py with StepOptions `steps`): host rows that start in them, GPU rows
    up to slack_ns later (the GPU lags the host), so the window's steps keep all their work and no
    step past it starts. A trace of several processes (one per GPU) is cut by the steps of the one
    with the most GPU work, every process's rows in the same window (the ranks step together)."""
    from .catalog import connect, one_row
    from .ingest import ingest_trace

    con = connect(None)
    run = ingest_trace(Path(src), None, {}, steps=steps, con=con)[0]
    t0, t1 = one_row(
        con,
        "SELECT min(host_start), max(host_end) FROM step_windows "
        "WHERE run_id = ? AND step BETWEEN ? AND ?",
        [run, first, last],
    )
    con.close()
    if t0 is None:
        raise BubblelabError(f"{src}: no steps {first}..{last} found")
    return trim_window(src, dst, t0, t1 - 1, t1 + slack_ns)


def run_windows(src: Path, names: list[str], domain: str = RUN_DOMAIN) -> list[tuple[int, int]]:
    """The [start, end] of the range named for each of `names` in NVTX domain `domain` (a sweep's
    nsys pass marks each run's timed region so), in the order given."""
    db = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
    try:
        rows = db.execute(
            """
            SELECT COALESCE(e.text, s.value), e.start, e."end" FROM NVTX_EVENTS e
            JOIN NVTX_EVENTS d ON d.eventType = 75 AND d.domainId = e.domainId AND d.text = ?
            LEFT JOIN StringIds s ON s.id = e.textId
            WHERE e.eventType = 59 AND e."end" IS NOT NULL""",
            (domain,),
        ).fetchall()
    except sqlite3.Error as e:
        raise BubblelabError(f"{src}: not an nsys export with NVTX ranges ({e})") from None
    finally:
        db.close()
    found = {name: (start, end) for name, start, end in rows}
    if missing := [n for n in names if n not in found]:
        raise BubblelabError(
            f"{src}: no {domain} range for {len(missing)} of {len(names)} runs "
            f"({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''})"
        )
    return [found[n] for n in names]


def split_runs(src: Path, names: list[str], dsts: list[Path]) -> list[Path]:
    """Cut a capture of several runs into one trace per run (dsts[i]: runs named names[i]): each
    keeps the rows of its run's marked window, as a capture of that run alone would (trim_window;
    the GPU rows of the calls in it: the run ends synchronised). The marks themselves stay out."""
    windows = run_windows(src, names)

    def one(i: int) -> Path:
        start, end = windows[i]
        return trim_window(src, dsts[i], start + 1, end, end)

    return map_files(one, range(len(names)))


def trim_window(src: Path, dst: Path, t0: int, t1: int, gpu_t1: int) -> Path:
    """Write to dst the whole small tables of src and its timed rows starting in [t0, t1]; kernels,
    copies and memsets starting in [t0, gpu_t1] whose launching call was kept (an op without its
    call would be GPU time of no step)."""
    src, dst = Path(src), Path(dst)
    if dst.exists():
        dst.unlink()
    db = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
    tables = {
        name: sql
        for name, sql in db.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'")
    }
    db.close()
    out = sqlite3.connect(dst)
    out.execute("ATTACH ? AS src", (f"file:{src}?mode=ro",))
    for name in (*WHOLE_TABLES, *TIMED_TABLES):
        if name not in tables:
            continue
        out.execute(tables[name])
        if name == "NVTX_EVENTS":  # domain creations and registered strings have no time window
            where = "WHERE eventType IN (33, 75) OR (start >= ? AND start <= ?)"
        elif name in GPU_TABLES and "CUPTI_ACTIVITY_KIND_RUNTIME" in tables:
            where = (
                "WHERE start >= ? AND start <= ? AND (correlationId, globalPid) IN ("
                " SELECT correlationId, globalTid - globalTid % 16777216"
                " FROM main.CUPTI_ACTIVITY_KIND_RUNTIME)"
            )
        elif name in TIMED_TABLES:
            where = "WHERE start >= ? AND start <= ?"
        else:
            where = ""
        params = (t0, gpu_t1 if name in GPU_TABLES else t1) if where else ()
        out.execute(f'INSERT INTO main."{name}" SELECT * FROM src."{name}" {where}', params)
    out.commit()
    out.execute("DETACH src")
    out.execute("VACUUM")
    out.close()
    return dst
