"""Per-step forward, sampling and period medians: nsys (catalog.duckdb) vs the in-process timeline
(timeline.duckdb) for every run of a run-and-profile directory. Issue acceptance: within 5% (median).

    python benchmarks/compare_nsys_timeline.py RUN_DIR > comparison.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bubblelab.profiling import analysis
from bubblelab.profiling.catalog import connect


def compare(run_dir: Path) -> list[dict]:
    nsys, timeline = connect(run_dir / "catalog.duckdb"), connect(run_dir / "timeline.duckdb")
    t_runs = analysis.runs(timeline).set_index(["streams", "depth"])
    rows = []
    for run in analysis.runs(nsys).itertuples():
        a = analysis.steady_state(analysis.per_step(nsys, run.run_id))
        b = analysis.steady_state(
            analysis.per_step(timeline, t_runs.loc[(run.streams, run.depth)].run_id)
        )
        row = {"streams": int(run.streams), "depth": int(run.depth)}
        for col in ("forward_ms", "sampling_ms", "period_ms", "bubble_ms"):
            x, y = float(a[col].median()), float(b[col].median())
            row[col] = {"nsys": x, "timeline": y, "rel_diff": (y - x) / x if x else None}
        rows.append(row)
    return rows


if __name__ == "__main__":
    print(json.dumps(compare(Path(sys.argv[1])), indent=1))
