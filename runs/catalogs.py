"""A DuckDB catalog file updated whole: work on a copy, then rename it over the original, so an
error or Ctrl-C midway leaves the catalog exactly as it was (bubblelab.core.files.write_atomic)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import duckdb

from ..core.errors import BubblelabError
from ..core.files import write_atomic
from ..profiling.catalog import connect
from ..profiling.ranks import rank_run_id

T = TypeVar("T")


def update_catalog(path: Path | None, work: Callable[[duckdb.DuckDBPyConnection], T]) -> T:
    """Run work(con) on the catalog at path (made if missing; in memory for None) and keep what it
    added only if it returns."""
    if path is None:
        con = connect(None)
        try:
            return work(con)
        finally:
            con.close()
    result: list[T] = []

    def build(copy: Path) -> None:
        for suffix in ("", ".wal"):  # a .wal holds committed work not yet in the file
            original = path.with_name(path.name + suffix)
            if original.is_file():
                shutil.copyfile(original, copy.with_name(copy.name + suffix))
        try:
            con = connect(copy)
            try:
                result.append(work(con))
            finally:
                con.close()
        except BubblelabError as e:  # name the user's catalog, not our working copy
            raise BubblelabError(str(e).replace(str(copy), str(path))) from None

    write_atomic(path, build)
    return result[0]


def rank_runs(catalog: duckdb.DuckDBPyConnection, run_id: str) -> dict[int, str]:
    """The worker ranks' runs of run_id in the catalog, by rank (none for one GPU)."""
    rows = catalog.execute("SELECT rank, run_id FROM runs WHERE rank > 0 ORDER BY rank").fetchall()
    return {int(rank): rid for rank, rid in rows if rid == rank_run_id(run_id, int(rank))}
