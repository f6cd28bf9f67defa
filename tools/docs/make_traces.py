"""Trim the nsys exports of a run-and-profile directory into small committed traces
(traces/*.sqlite.gz).

For each run under nsys: a window of --steps consecutive steps from the middle of the run (so it
holds steady decode and, at many streams, some prefills), trimmed by profiling.trim, gzipped, with
its run metadata in traces/index.json, and how much nsys inflated its configuration's steady-state
medians against the same configuration unprofiled (costmodel.perturbation, RUN_DIR/results.json).

    python -m tools.docs.make_traces RUN_DIR OUT_DIR --steps 120 [--streams 1,32]
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
from pathlib import Path

from bubblelab.costmodel.perturbation import profiler_perturbation
from bubblelab.profiling import analysis
from bubblelab.profiling.catalog import connect
from bubblelab.profiling.ingest import plain_sqlite
from bubblelab.profiling.trim import trim
from bubblelab.runs.rundir import read_results

INFLATED = ("period", "forward", "sampling", "bubble", "host_tick", "launch")


def inflation(run_dir: Path) -> dict[tuple[int, int], dict]:
    """(streams, depth) -> nsys / unprofiled - 1 per steady-state median, and the unprofiled."""
    results = read_results(run_dir)
    table = profiler_perturbation(results.runs, results.steps)
    return {
        (int(r["streams"]), int(r["depth"])): {
            "nsys_over_unprofiled": {p: round(r[f"{p}_inflation"], 4) for p in INFLATED},
            "unprofiled_ms": {p: round(r[f"{p}_plain"], 4) for p in INFLATED},
            "unprofiled_runs": r["runs_plain"],
        }
        for r in table.to_dict("records")
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--streams", help="only these stream counts (comma-separated)")
    a = ap.parse_args()
    streams = {int(s) for s in a.streams.split(",")} if a.streams else None
    a.out_dir.mkdir(parents=True, exist_ok=True)
    con = connect(a.run_dir / "catalog.duckdb")
    inflated = inflation(a.run_dir)
    index = {}
    for run in analysis.runs(con).to_dict("records"):
        if run["source"] != "nsys" or (streams and run["streams"] not in streams):
            continue  # the unprofiled runs have no trace to commit
        steps = analysis.per_step(con, run["run_id"]).step.sort_values().to_numpy()
        first = int(steps[max(0, len(steps) // 2 - a.steps // 2)])
        last = first + a.steps - 1
        name = f"{run['preset']}-s{run['streams']}-d{run['depth']}"
        plain = a.out_dir / f"{name}.sqlite"
        # a sweep keeps each run's export gzipped (traces/run.N.sqlite.gz); SQLite needs it plain
        with plain_sqlite(Path(run["trace_path"])) as source:
            trim(source, plain, first, last)
        with plain.open("rb") as src, gzip.open(f"{plain}.gz", "wb", compresslevel=9) as dst:
            shutil.copyfileobj(src, dst)
        plain.unlink()
        index[f"{name}.sqlite.gz"] = {
            **{
                k: (str(v) if k == "started_at" else v)
                for k, v in run.items()
                if k not in ("trace_path",)
            },
            "steps": [first, last],
            "nsys_inflation": inflated.get((run["streams"], run["depth"])),
        }
    (a.out_dir / "index.json").write_text(json.dumps(index, indent=1, default=str))


if __name__ == "__main__":
    main()
