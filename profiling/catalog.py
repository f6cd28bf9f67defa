"""The DuckDB catalog that holds ingested runs, and the connection helpers around it.

DuckDB's `sqlite` extension cannot be downloaded here; the `duckdb-extension-sqlite` wheel ships it,
and DuckDB only loads an extension file named after the extension, so we copy it once to
`sqlite_scanner.duckdb_extension`.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import duckdb

from ..core.errors import BubblelabError
from .queries import read_sql

# No network, ever: DuckDB would otherwise download an extension it lacks over HTTP (users run
# this on air-gapped GPU boxes). The one extension we load comes from duckdb-extension-sqlite.
OFFLINE: dict[str, str | bool | int | float | list[str]] = {
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "allow_community_extensions": False,
}
SQLITE_MAGIC = b"SQLite format 3\x00"
T = TypeVar("T")
R = TypeVar("R")
CATALOG_VERSION = 6  # bump when a table of sql/catalog_schema.sql changes
RUN_COLUMNS = (
    "run_id",
    "model",
    "preset",
    "depth",
    "streams",
    "output_len_mean",
    "mean_generated_len",
    "requests",
    "device",
    "driver",
    "torch",
    "nsys_version",
    "schema_version",
    "command",
    "started_at",
    "wall_s",
    "generated_tokens",
    "decode_steps",
    "source",
    "trace_path",
    "tensor_parallel",
    "rank",
)


def connect(
    catalog: Path | str | None = None, read_only: bool = False
) -> duckdb.DuckDBPyConnection:
    """Open (creating if needed) a catalog; None or ':memory:' gives a throwaway in-memory one.
    read_only: an existing catalog, to answer questions from (a run directory's, which a report or
    another reader may have open too)."""
    path = ":memory:" if catalog in (None, ":memory:") else str(catalog)
    if read_only:
        if not Path(path).is_file():
            raise BubblelabError(f"no catalog at {path}")
        try:
            con = duckdb.connect(path, read_only=True, config=OFFLINE)
        except duckdb.Error as e:
            raise BubblelabError(f"cannot open catalog {path}: {str(e).splitlines()[0]}") from None
        con.execute("SET asof_loop_join_threshold = 0")  # as below
        _check_version(con, path, read_only=True)
        return con
    if path != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        if _is_sqlite(Path(path)):
            raise BubblelabError(
                f"{path} is an SQLite file (an nsys export?), not a DuckDB catalog: "
                "pass it as a trace"
            )
    try:
        con = duckdb.connect(path, config=OFFLINE)
    except duckdb.Error as e:
        raise BubblelabError(f"cannot open catalog {path}: {str(e).splitlines()[0]}") from None
    _session(con)
    con.execute(f"SET threads = {duckdb_threads()}")
    con.execute(read_sql("catalog_schema"))
    _check_version(con, path)
    return con


def map_cursors(
    con: duckdb.DuckDBPyConnection, work: Callable[[duckdb.DuckDBPyConnection, T], R],
    items: Iterable[T], most: int | None = None,
) -> list[R]:  # fmt: skip
    """work(cursor, item) for each item in threads, each on a cursor of its own made here (a
    connection is not shared between threads), at most `most` threads and one a CPU: DuckDB lets
    go of the GIL while it runs a query. Results in the items' order; the cursors closed after."""
    items = list(items)
    cursors = [con.cursor() for _ in items]
    try:
        for cur in cursors:
            _session(cur)  # as connect sets a connection
        threads = max(1, min(len(items), os.cpu_count() or 1, most or len(items)))
        with ThreadPoolExecutor(threads) as pool:
            return list(pool.map(work, cursors, items))
    finally:
        for cur in cursors:
            cur.close()


def _session(con: duckdb.DuckDBPyConnection) -> None:
    # Row estimates of data inserted in the open ingest transaction are tiny, which would make
    # DuckDB run ASOF joins as nested loops (steps x ops); the sort-merge ASOF join is linear at any
    # size.
    con.execute("SET asof_loop_join_threshold = 0")
    con.execute(
        "SET preserve_insertion_order = false"
    )  # every query orders its answer; inserts go 2x faster


def duckdb_threads() -> int:
    """One core fewer than this process may use (at least one). DuckDB's parallel operators meet
    at barriers, so a thread that another job has descheduled stalls the others: on the 2-core
    machine under a load average of 3.5-6 from other jobs, one thread analysed the 1M-kernel
    sync and eager benchmark traces in 6.0-9.9 s where two took 8.0-13.0 s (ours: 5.8-6.5 s
    against 6.6-7.1), with less CPU time too; with the
    machine otherwise quiet one thread was still as fast (4.1 s against 4.9 on the sync trace, 6.5
    against 6.3-7.2 on the eager one; benchmarks/README.md). On a large machine the core left over
    costs little."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, cores - 1)


def copy_catalog(src: Path, dst: Path) -> Path:
    """Write to dst a fresh copy of the catalog at src: the same tables and rows, without the free
    blocks that an ingest's temporary tables and rewrites leave behind in the file."""
    con = duckdb.connect(config=OFFLINE)
    try:
        con.execute(f"SET threads = {duckdb_threads()}")
        con.execute(f"ATTACH {sql_string(str(src))} AS src (READ_ONLY)")
        con.execute(f"ATTACH {sql_string(str(dst))} AS dst")
        con.execute("COPY FROM DATABASE src TO dst")
    finally:
        con.close()
    return dst


def one_row(con: duckdb.DuckDBPyConnection, sql: str, params: list | None = None) -> tuple:
    """The one row of a query that always returns one (an aggregate, a lookup known to hit)."""
    row = con.execute(sql, params or []).fetchone()
    if row is None:
        raise BubblelabError(f"the catalog answered nothing to: {sql.split()[0:4]}")
    return row


def _is_sqlite(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC
    except OSError:
        return False


def _check_version(con: duckdb.DuckDBPyConnection, path: str, read_only: bool = False) -> None:
    try:
        found = one_row(con, "SELECT max(version) FROM catalog_info")[0]
        if found is None and one_row(con, "SELECT count(*) FROM runs")[0]:
            found = 1  # runs but no version: written before catalogs carried one
    except duckdb.CatalogException:  # read-only and no catalog tables: not a catalog
        con.close()
        raise BubblelabError(f"{path} is not a bubblelab catalog") from None
    if found is None and read_only:
        return  # an empty catalog: nothing to answer from, nothing to check
    if found is None:
        con.execute("INSERT INTO catalog_info VALUES (?)", [CATALOG_VERSION])
    elif found != CATALOG_VERSION:
        con.close()
        raise BubblelabError(
            f"catalog {path} has layout {found}, this bubblelab writes layout {CATALOG_VERSION}: "
            "ingest the traces into a new catalog"
        )


def load_sqlite_extension(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(f"LOAD {sql_string(str(_sqlite_extension_path()))}")


def sql_string(text: str) -> str:
    """A quoted SQL string literal (ATTACH and LOAD take no parameters)."""
    return "'" + text.replace("'", "''") + "'"


def _sqlite_extension_path() -> Path:
    spec = importlib.util.find_spec("duckdb_extension_sqlite")
    if spec is None or not spec.submodule_search_locations:
        raise BubblelabError(
            "the duckdb-extension-sqlite package is missing (pip install duckdb-extension-sqlite)"
        )
    shipped = (
        Path(next(iter(spec.submodule_search_locations)))
        / "extensions"
        / f"v{duckdb.__version__}"
        / "sqlite.duckdb_extension"
    )
    if not shipped.is_file():
        raise BubblelabError(
            f"duckdb-extension-sqlite has no build for duckdb {duckdb.__version__}"
        )
    target = (
        Path(tempfile.gettempdir())
        / f"bubblelab-duckdb-{duckdb.__version__}"
        / "sqlite_scanner.duckdb_extension"
    )
    if not target.is_file() or target.stat().st_size != shipped.stat().st_size:
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(
            f".{os.getpid()}.tmp"
        )  # atomic rename: parallel test workers race here
        shutil.copyfile(shipped, partial)
        os.replace(partial, target)
    return target
