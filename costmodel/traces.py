"""Committed nsys traces (traces/*.sqlite.gz, described by traces/index.json) as one `Results`.

The notebooks read the traces through this, and it builds the same tables run-and-profile writes into
results.json, with profiling's public answers (ingest, per_step, steady_state, attribution, idle_gaps): the
report, `bubblelab analyze` and the notebooks therefore agree on every number.
"""
from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pandas as pd

from costmodel.results import Results
from engine.errors import BubblelabError
from profiling import analysis
from profiling.catalog import connect
from profiling.ingest import META_KEYS, ingest

TRACES_DIR = Path(__file__).resolve().parent.parent / "traces"
LANE_SQL = Path(__file__).parent / "sql" / "lane_ranges.sql"
GAP_STEPS = 50       # idle gaps of this many steady steps per run: a forward leaves ~2,000 kernel gaps a step
LANE_STEPS = 12      # steps of raw host/GPU ranges kept per run for the lane chart
LANE_MIN_GAP_NS = 20_000   # GPU idle shorter than this is drawn as busy (a pixel of the chart is ~100 us)


def load_traces(names: list[str] | None = None, traces_dir: Path | str = TRACES_DIR,
                catalog: Path | str | duckdb.DuckDBPyConnection | None = None) -> Results:
    """Ingest the indexed traces (all of index.json by default) and collect runs, steps, attribution, gaps
    and a lane window per run. catalog: a DuckDB file to keep (re-ingesting a trace adds nothing), or an
    open catalog connection to ask profiling.analysis more questions afterwards; default in memory."""
    traces_dir = Path(traces_dir)
    index_path = traces_dir / "index.json"
    if not index_path.is_file():
        raise BubblelabError(f"no index.json in {traces_dir}")
    index = json.loads(index_path.read_text())
    if unknown := sorted(set(names or ()) - set(index)):
        raise BubblelabError(f"not in {index_path}: {', '.join(unknown)}")
    con = catalog if isinstance(catalog, duckdb.DuckDBPyConnection) else connect(catalog)
    run_ids = [ingest(traces_dir / name, None, {k: v for k, v in index[name].items() if k in META_KEYS}, con=con)
               for name in names or index]
    runs = analysis.runs(con)
    runs = runs[runs["run_id"].isin(run_ids)].reset_index(drop=True)
    steps, attribution, gaps, lanes = [], [], [], []
    for run_id in runs["run_id"]:
        per_step = analysis.per_step(con, run_id)
        steady = analysis.steady_state(per_step)
        steps.append(per_step)
        attribution.append(analysis.attribution(con, run_id, steady)[["run_id", "phase", "bubble_ms"]])
        g = analysis.idle_gaps(con, run_id, _middle(steady, GAP_STEPS))
        gaps.append(pd.DataFrame({"run_id": run_id, "step": g["step"], "gap_ms": g["idle_us"] / 1e3}))
        lanes.append(lane_ranges(con, run_id, _middle(steady, LANE_STEPS)))
    return Results(runs, pd.concat(steps, ignore_index=True), pd.concat(attribution, ignore_index=True),
                   pd.concat(gaps, ignore_index=True), pd.concat(lanes, ignore_index=True),
                   provenance={"traces": {name: str(traces_dir / name) for name in names or index}})


def lane_ranges(con: duckdb.DuckDBPyConnection, run_id: str, steps: pd.DataFrame) -> pd.DataFrame:
    """Host ranges and GPU islands of the given steps (sql/lane_ranges.sql), as results.json's `timeline`."""
    if steps.empty:
        return pd.DataFrame()
    params = {"run_id": run_id, "first": int(steps["step"].min()), "last": int(steps["step"].max()),
              "min_gap_ns": LANE_MIN_GAP_NS}
    return con.execute(LANE_SQL.read_text(), params).df().assign(run_id=run_id)


def _middle(steps: pd.DataFrame, n: int) -> pd.DataFrame:
    """n consecutive rows from the middle of a (steady-state) table."""
    steps = steps.sort_values("step")
    start = max(0, len(steps) // 2 - n // 2)
    return steps.iloc[start:start + n]
