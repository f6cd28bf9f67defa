"""Trim the nsys exports of a run-and-profile directory into small committed traces
(traces/*.sqlite.gz).

For each run: a window of --steps consecutive steps from the middle of the run (so it holds steady
decode and, at many streams, some prefills), trimmed by profiling.trim, gzipped, with its run
metadata in traces/index.json.

    python -m tools.docs.make_traces RUN_DIR OUT_DIR --steps 120
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
from pathlib import Path

from bubblelab.profiling import analysis
from bubblelab.profiling.catalog import connect
from bubblelab.profiling.trim import trim


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--steps", type=int, default=120)
    a = ap.parse_args()
    a.out_dir.mkdir(parents=True, exist_ok=True)
    con = connect(a.run_dir / "catalog.duckdb")
    index = {}
    for run in analysis.runs(con).to_dict("records"):
        steps = analysis.per_step(con, run["run_id"]).step.sort_values().to_numpy()
        first = int(steps[max(0, len(steps) // 2 - a.steps // 2)])
        last = first + a.steps - 1
        name = f"{run['preset']}-s{run['streams']}-d{run['depth']}"
        plain = a.out_dir / f"{name}.sqlite"
        trim(Path(run["trace_path"]), plain, first, last)
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
        }
    (a.out_dir / "index.json").write_text(json.dumps(index, indent=1, default=str))


if __name__ == "__main__":
    main()
