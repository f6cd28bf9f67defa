"""What a sweep costs after its passes, on the CPU: the assembly (ingest, catalog, results file) and
the report (page, Perfetto trace, Parquet) of a run directory the size of the qwen3-4b 1/8/32
sweep, and how many bytes each part of the directory takes.

The directory is made here, without a GPU: a CPU sweep's unprofiled pass (tiny-llama, 1 and 4
streams, its repeat rule's defaults: ~50 runs, ~24k steps, about the 4b sweep's 25.6k) and, as its
nsys pass, the four committed qwen3-0.6b traces, each replayed to --kernels kernels
(benchmarks.analyze_1m_kernels.scale_up: 4 x 400k, where the 4b sweep's six reports held ~1.6M).
The records of that pass are plain runs' of the same depth, their step lists cut or extended to
the trace's decode steps (assembly checks each report against its run's record). Then, per
repeat: assemble, then report, each timed, with every file's size.

    .venv/bin/python -m benchmarks.sweep_assembly [--plain DIR] [--kernels 400000] [--repeats 1]
        [--work DIR] [--json OUT.json]

--plain: an existing CPU sweep (`bubblelab run-and-profile --model tiny-llama --device cpu
--streams 1,4 --no-nsys --out DIR`) instead of making one (~2 min).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

from benchmarks.analyze_1m_kernels import scale_up
from bubblelab.core.files import write_atomic
from bubblelab.profiling import analysis, nsys
from bubblelab.profiling.catalog import connect
from bubblelab.profiling.ingest import ingest_trace
from bubblelab.report.report import report_run_dir
from bubblelab.runs.assemble import assemble
from bubblelab.runs.machine import cpu_facts, git_facts
from bubblelab.runs.record import load_record, read_record, records_in, tag_of, write_record

ROOT = Path(__file__).parents[1]
SEEDS = ["s1-d1", "s1-d2", "s32-d1", "s32-d2"]  # traces/qwen3-0.6b-<seed>.sqlite.gz
NSYS_TAGS = ["s1-d1-r0", "s1-d2-r0", "s4-d1-r0", "s4-d2-r0"]
DERIVED = ("results.json", "results.json.gz", "report.html", "catalog.duckdb", "timeline.duckdb")


def plain_sweep(out: Path) -> Path:
    # Imported here: the sweep imports torch, and the processes the assembly and the report spawn
    # import this module again (as __mp_main__), where it would cost seconds each.
    from bubblelab.runs.sweep import SweepSpec, run_sweep

    spec = SweepSpec(model="tiny-llama", device="cpu", streams=[1, 4])
    run_sweep(spec, out, use_nsys=False)
    return out


def big_traces(work: Path, kernels: int) -> list[Path]:
    """The committed seeds replayed to `kernels` kernels each, slimmed and gzipped as a sweep keeps
    them (runs.passes.compress)."""
    from bubblelab.runs.passes import compress  # imports torch: not in the spawned processes

    out = []
    for seed in SEEDS:
        target = work / f"{seed}-{kernels}.sqlite.gz"
        if not target.is_file():
            plain = work / f"{seed}.sqlite"
            with gzip.open(ROOT / "traces" / f"qwen3-0.6b-{seed}.sqlite.gz") as src:
                write_atomic(plain, src.read())
            big = work / f"{seed}-{kernels}.sqlite"
            big.unlink(missing_ok=True)
            scale_up(plain, big, kernels)
            assert compress([big]) == [target]  # slimmed and gzipped as a sweep keeps them
            plain.unlink()
        out.append(target)
    return out


def decode_steps(trace: Path) -> int:
    """The trace's decode steps (counted once, kept beside it)."""
    counted = trace.with_name(trace.name + ".decodes")
    if not counted.is_file():
        con = connect(None)
        (run_id,) = ingest_trace(trace, None, {}, con=con)
        steps = analysis.per_step(con, run_id)
        write_atomic(counted, str(int((steps["kind"] == "decode").sum())))
        con.close()
    return int(counted.read_text())


def matched(record: dict, decodes: int) -> dict:
    """The record with exactly `decodes` decode steps: the last ones dropped, or copies of its
    decode steps appended under new step numbers."""
    steps = record["timeline"]["steps"]
    decode = [s for s in steps if s["kind"] == "decode"]
    kept, extra = [], decodes
    for s in steps:
        if s["kind"] != "decode" or extra > 0:
            kept.append(s)
            extra -= s["kind"] == "decode"
    last = max(s["step"] for s in steps)
    for i in range(extra):
        kept.append({**decode[i % len(decode)], "step": last + 1 + i})
    return {**record, "timeline": {**record["timeline"], "steps": kept}}


def lay_out(plain: Path, traces: list[Path], run_dir: Path) -> Path:
    """The plain sweep's runs; as its nsys pass, the big traces with the records of NSYS_TAGS."""
    shutil.rmtree(run_dir, ignore_errors=True)
    shutil.copytree(plain, run_dir, ignore=shutil.ignore_patterns(*DERIVED, "export"))
    runs = run_dir / "runs" / "plain"
    for path in records_in(runs):  # a sweep from before gzipped records: as a sweep writes now
        if path.suffix == ".json":
            write_record(runs, tag_of(path), load_record(path))
            path.unlink()
    plan = json.loads((runs / "plan.json").read_text())
    nsys_dir = run_dir / "runs" / "nsys"
    nsys_dir.mkdir()
    chosen = sorted((r for r in plan["runs"] if r["tag"] in NSYS_TAGS),
                    key=lambda r: NSYS_TAGS.index(r["tag"]))  # fmt: skip
    plan.update(runs=chosen, out_dir=str(nsys_dir), profile=True)
    write_atomic(nsys_dir / "plan.json", json.dumps(plan))
    for tag, trace in zip(NSYS_TAGS, traces, strict=True):
        write_record(nsys_dir, tag, matched(read_record(runs, tag), decode_steps(trace)))
    (run_dir / "traces").mkdir()
    for n, trace in enumerate(traces, 1):
        shutil.copy(trace, run_dir / "traces" / f"run.{n}.sqlite.gz")
    status = json.loads((run_dir / "status.json").read_text())
    status["planned"] += [f"nsys/{tag}" for tag in NSYS_TAGS]
    write_atomic(run_dir / "status.json", json.dumps(status, indent=1))
    return run_dir


def sizes(run_dir: Path) -> dict[str, int]:
    """Bytes by part: each top-level file, and each folder whole."""
    out = {}
    for path in sorted(run_dir.iterdir()):
        files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
        out[path.name] = sum(p.stat().st_size for p in files)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plain", type=Path, default=None)
    ap.add_argument("--kernels", type=int, default=400_000)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--work", type=Path, default=Path("/tmp/bubblelab-sweep-assembly"))
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("NSYS", str(_fake_nsys(args.work)))  # assembly stamps nsys's version
    nsys._version_of.cache_clear()
    plain = args.plain or (args.work / "plain")
    if args.plain is None and not (plain / "status.json").is_file():
        print("making the CPU sweep (~2 min)", file=sys.stderr)
        plain_sweep(plain)
    traces = big_traces(args.work, args.kernels)
    rows: list[dict] = []
    times: dict[str, list[float]] = {"assemble_s": [], "report_s": []}
    for repeat in range(args.repeats):
        run_dir = lay_out(plain, traces, args.work / "run")
        t = time.perf_counter()
        assemble(run_dir)
        assembled = time.perf_counter() - t
        t = time.perf_counter()
        report_run_dir(run_dir, n_boot=1000)
        reported = time.perf_counter() - t
        times["assemble_s"].append(assembled)
        times["report_s"].append(reported)
        held = sizes(run_dir)
        rows.append({"repeat": repeat, "assemble_s": assembled, "report_s": reported,
                     "bytes": held})  # fmt: skip
        print(f"repeat {repeat}: assemble {assembled:.1f} s, report {reported:.1f} s, "
              f"{sum(held.values()) / 1e6:.1f} MB", file=sys.stderr)  # fmt: skip
    doc = {
        "kernels_per_trace": args.kernels, "traces": len(traces), "repeats": args.repeats,
        "assemble_s_median": statistics.median(times["assemble_s"]),
        "report_s_median": statistics.median(times["report_s"]),
        "rows": rows, "cpu": cpu_facts(), "git": git_facts(),
    }  # fmt: skip
    text = json.dumps(doc, indent=1)
    if args.json:
        write_atomic(args.json, text + "\n")
    print(text)


def _fake_nsys(work: Path) -> Path:
    fake = work / "nsys-version"
    write_atomic(fake, '#!/bin/sh\necho "NVIDIA Nsight Systems version 2025.3.1.90-0v0"\n')
    fake.chmod(0o755)
    return fake


if __name__ == "__main__":
    main()
