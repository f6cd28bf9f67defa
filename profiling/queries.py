"""Loads the .sql files of profiling/sql/ and runs them with named parameters.

Each file answers one question. A query may read earlier answers by name: pass them as `relations`
(DataFrames, or lazy DuckDB relations from `relation()` that never leave DuckDB), e.g. the
attribution query reads the `per_step` table of the steps it should cover.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import TypeAlias

import duckdb
import pandas as pd

SQL_DIR = Path(__file__).parent / "sql"


@cache
def read_sql(name: str) -> str:
    return (SQL_DIR / f"{name}.sql").read_text()


Relation: TypeAlias = pd.DataFrame | duckdb.DuckDBPyRelation


def _used(name: str, params: dict | None) -> dict:
    """The parameters the file uses: callers pass a run's whole set (DuckDB refuses unused ones)."""
    sql = read_sql(name)
    return {k: v for k, v in (params or {}).items() if re.search(rf"\${k}\b", sql)}


def run(
    con: duckdb.DuckDBPyConnection, name: str, params: dict | None = None, **relations: Relation
) -> pd.DataFrame:
    """Run profiling/sql/<name>.sql; `$param` placeholders come from `params`."""
    for rel_name, frame in relations.items():
        con.register(rel_name, frame)
    try:
        return con.execute(read_sql(name), _used(name, params)).df()
    finally:
        for rel_name in relations:
            con.unregister(rel_name)


def relation(
    con: duckdb.DuckDBPyConnection, name: str, params: dict | None = None
) -> duckdb.DuckDBPyRelation:
    """The query as a lazy relation, to feed another query without a round trip through pandas."""
    return con.sql(read_sql(name), params=_used(name, params))


def execute(con: duckdb.DuckDBPyConnection, name: str, params: dict | None = None) -> None:
    """Run a statement file for its effect (ingestion steps); statements end with `;` at a line's
    end (DuckDB binds parameters one statement at a time)."""
    for statement in filter(str.strip, re.split(r";\s*$", read_sql(name), flags=re.M)):
        used = {k: v for k, v in (params or {}).items() if re.search(rf"\${k}\b", statement)}
        con.execute(statement, used)


def insert(
    con: duckdb.DuckDBPyConnection, table: str, name: str, params: dict | None = None
) -> None:
    """Store a query's answer: INSERT INTO <table> <profiling/sql/name.sql>."""
    con.execute(f"INSERT INTO {table} {read_sql(name)}", _used(name, params))
