"""Where a run-and-profile sweep's seconds went, per pass, from its results file.

    .venv/bin/python -m tools.docs.sweep_time \\
        docs/measurements/2026-11-23/costmodel-dev/dev-qwen3-4b.results.json.gz

Reads provenance.timings (what the passes and the worker recorded) and the runs table (each run's
workload wall time). Sweeps from before the parts were timed one by one (no `start_s`, `load_s`,
`run_parts_s`) show what can be derived: the time outside the worker (start-up and nsys's wrap-up
together) and, per run, the time around the workload (warm-up, profiler range, record together).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bubblelab.runs.rundir import read_results


def pass_parts(timings: dict, workload_s: dict[str, float]) -> list[tuple[str, float | None]]:
    """(part, seconds) of one pass, in the order they happen; None: not recorded."""
    runs_s = timings.get("runs_s", {})
    work = sum(workload_s.get(tag, 0.0) for tag in runs_s)
    parts = timings.get("run_parts_s")
    around = (
        {k: sum(p[k] for p in parts.values()) for k in ("warmup", "profiler", "record")}
        if parts
        else None
    )
    outside = timings["wall_s"] - timings.get("total_s", timings["wall_s"])
    rows: list[tuple[str, float | None]] = []
    if "start_s" in timings:
        rows.append(("process start (interpreter, imports; nsys starting)", timings["start_s"]))
    if "import_ahead_s" in timings:  # engine.start.import_ahead, before the wait (eda69b0 on)
        rows.append(("imports made ahead (Triton, our kernels, torch.compile)",
                     timings["import_ahead_s"]))  # fmt: skip
    if "wait_gpu_s" in timings:  # the pass before holds the GPU, then ends (runs.passes gates)
        waited = timings["wait_gpu_s"] + timings.get("wait_timing_s", 0.0)
        rows.append(("waiting for the pass or process before (its GPU, then its end)", waited))
    if "load_s" in timings:
        rows += [
            ("model load", timings["load_s"]),
            ("compile + graph capture", timings["engine_s"]),
        ]
        names = {  # engine.cuda_graphs' parts, as the worker recorded them (none before 2026-12-03)
            "sampler_warmup_s": "of which: the sampler's compile",
            "warmup_s": "of which: every shape's warm-up (torch.compile)",
            "capture_s": "of which: graph capture",
            "replay_s": "of which: each graph's first replay",
        }
        engine_parts = timings.get("engine_parts_s", {})
        rows += [(words, engine_parts[key]) for key, words in names.items() if key in engine_parts]
    else:
        rows.append(("load + compile + graph capture", timings.get("setup_s")))
    rows.append((f"{len(runs_s)} runs: the workloads", work))
    if around is not None:
        rows += [
            ("runs: warm-up", around["warmup"]),
            ("runs: opening and closing the profiler range", around["profiler"]),
            ("runs: writing each record", around["record"]),
        ]
    else:
        rows.append(("runs: around the workload (warm-up, profiler range, record)",
                     sum(runs_s.values()) - work))  # fmt: skip
    if "capture_open_s" in timings:  # the pass is one capture range (runs.worker)
        rows.append(("the pass's capture range: opening and closing",
                     timings["capture_open_s"] + timings.get("capture_close_s", 0.0)))  # fmt: skip
    if "finish_s" in timings:
        rows.append(("after the worker (nsys: last reports, their export)", timings["finish_s"]))
    else:
        rows.append(("outside the worker (start-up, and nsys's wrap-up)", outside))
    if "split_s" in timings:
        rows.append(("of which: the export cut into a trace per run", timings["split_s"]))
    rows.append(("pass wall clock", timings["wall_s"]))
    rows.append(("ingest (after the passes)", timings.get("ingest_s")))
    return rows


def markdown(path: Path) -> str:
    results = read_results(path)
    runs = results.runs
    timings = results.provenance.get("timings", {})
    lines = []
    later = sorted(k for k in timings if k.startswith("plain."))  # its later worker processes
    for name in ("plain", *later, "nsys"):
        if name not in timings:
            continue
        mine = runs[runs["profiled"] == (name == "nsys")]
        tags = [f"s{int(r.streams)}-d{int(r.depth)}-r{int(r.repeat)}" for r in mine.itertuples()]
        workload = dict(zip(tags, mine["wall_s"].astype(float), strict=True))
        pass_name, _, process = name.partition(".")
        title = f"{pass_name} pass, worker process {process}" if process else f"{name} pass"
        lines += [f"{title}:", "", "| part | s |", "|---|---|"]
        for part, seconds in pass_parts(timings[name], workload):
            lines.append(f"| {part} | {'–' if seconds is None else f'{seconds:.1f}'} |")
        if counters := timings[name].get("compile_counters"):
            lines += ["", "torch.compile: " + ", ".join(f"{k} {v}" for k, v in counters.items())]
        lines.append("")
    if "assemble" in timings:
        lines.append(f"assembly (ingest, catalog, tables): {timings['assemble']['wall_s']:.1f} s")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, nargs="+", help="run directories or results files")
    for path in parser.parse_args().results:
        print(f"{path}:\n\n{markdown(path)}\n")


if __name__ == "__main__":
    main()
