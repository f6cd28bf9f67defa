"""A run directory of simulated runs (costmodel.simulate): what the report looks like without a
GPU.

Each simulated run's timeline is ingested like an engine's in-process timeline
(profiling.ingest.ingest_timeline), so its attribution and idle gaps come from the same SQL as a
measured run's (runs.tables.collect)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..core.errors import BubblelabError
from ..core.timeline import StepInfo, Timeline
from ..costmodel.simulate import LoopCosts, simulate_run
from ..profiling.catalog import connect
from ..profiling.ingest import ingest_timeline
from .rundir import RESULTS_FILE, WRITTEN_FILE, load_document, results_path, write_results
from .schema import SIMULATED
from .state import OURS, holds_run
from .tables import collect


def is_simulated(run_dir: Path) -> bool:
    """The directory holds only a demo's files: results.json marked simulated (and a report)."""
    present = {name for name in OURS if (run_dir / name).exists()}
    if not present <= {RESULTS_FILE, WRITTEN_FILE, "report.html"}:
        return False
    path = results_path(run_dir)
    if path is None:
        return True
    try:
        doc = load_document(path)
        return isinstance(doc, dict) and doc.get("provenance", {}).get(SIMULATED) is True
    except (BubblelabError, AttributeError):
        return False


def write_demo_run_dir(
    run_dir: Path | str,
    streams: tuple[int, ...] = (1, 8),
    requests_per_stream: int = 4,
    output_len: int = 48,
    costs: LoopCosts | None = None,
    seed: int = 0,
    depths: tuple[int, ...] = (1, 2),
) -> Path:
    """A run directory of simulated depth-1 / depth-2 pairs (or runs at the depths given): what the
    report looks like without a GPU. Refuses a directory that holds measured results: simulated
    data never replaces them."""
    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise BubblelabError(f"{run_dir} is a file, not a run directory")
    if holds_run(run_dir) and not is_simulated(run_dir):
        raise BubblelabError(
            f"{run_dir} holds measured results: --demo writes simulated runs only into a new "
            "directory (or over an earlier demo)"
        )
    runs, steps, timelines = [], [], []
    con = connect(None)
    try:
        for s in streams:
            for depth in depths:
                r = simulate_run(
                    depth,
                    streams=s,
                    requests=requests_per_stream * s,
                    output_len=output_len,
                    costs=costs,
                    seed=seed + s,
                )
                run_id = r["run"]["run_id"]
                ingest_timeline(as_timeline(r), con, {"depth": depth}, run_id=run_id)
                runs.append(r["run"])
                steps.append(r["steps"])
                timelines.append(r["timeline"])
        measured = collect(con, [r["run_id"] for r in runs])
    finally:
        con.close()
    provenance = {
        "command": f"write_demo_run_dir(streams={tuple(streams)})",
        "note": "simulated loop (costmodel.simulate), not a measurement",
        SIMULATED: True,
    }
    return write_results(
        run_dir,
        pd.DataFrame(runs),
        pd.concat(steps, ignore_index=True),
        measured.attribution,
        measured.gaps,
        provenance,
        pd.concat(timelines, ignore_index=True),
    )


def as_timeline(run: dict) -> Timeline:
    """A simulated run (costmodel.simulate.simulate_run) as the engine's in-process Timeline: its
    host and device ranges, and each step's kind, rows and tokens (a prefill's rows are whole
    prompts of the run's prompt_len, as costmodel.schedule.replay admits them)."""
    timeline = Timeline(depth=int(run["run"]["depth"]))
    ranges = run["timeline"]
    for lane, ranges_of_lane in ranges.groupby("lane"):
        add = timeline.add_host if lane == "host" else timeline.add_device
        for phase, step, start, end in ranges_of_lane[
            ["phase", "step", "start_ns", "end_ns"]
        ].itertuples(index=False):
            add(str(phase), int(step), int(start), int(end))
    prompt_len = int(run["run"]["prompt_len"])
    for step in run["steps"].itertuples():
        rows = int(step.batch_size)
        tokens = rows * prompt_len if step.kind == "prefill" else rows
        timeline.add_step(StepInfo(int(step.step), str(step.kind), rows, tokens))
    return timeline
