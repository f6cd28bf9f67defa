"""Does run-and-profile capture and analyse every rank of a tensor-parallel run under nsys? A small
sweep at TP N (both depths; unprofiled repeats, then one repeat under nsys), run by the library
exactly as `bubblelab run-and-profile --tensor-parallel N` runs it, then:

- from each nsys report (DIR/traces/run.<n>.sqlite): kernels and NCCL kernels per GPU, our NVTX
  ranges per process (every rank captured: a GPU and a process per rank);
- from the catalog: each nsys run's ranks (one run per process, ranked at ingest) and the per-rank
  analysis of every TP run (profiling.ranks via profiling.overview.analyze: the ranks' medians,
  straggler, skew, collectives apart from compute, where each rank's bubble went);
- the prediction table with the GPU pieces taken across ranks (costmodel.tensor_parallel).

The workers are spawned (fork + exec), which nsys follows by default. Writes OUT (JSON) and, beside
it, the run directory's results.json gzipped (OUT's stem + -results.json.gz), whose `ranks` table
holds every rank's steps. A sweep that fails is reported with what its traces hold.

    python -m benchmarks.tp_nsys_check --model qwen3-0.6b --tp 2 --out $OUT/tp-nsys-check.json
    python -m benchmarks.tp_nsys_check --device cpu --no-nsys --model tiny-llama --streams 2 \
        --max-model-len 64 --out /tmp/tp-check.json    # the analysis path, on the CPU
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sqlite3
from pathlib import Path
from typing import Any

from bubblelab.core.errors import BubblelabError
from bubblelab.core.files import write_atomic
from bubblelab.costmodel.predict import predict_runs
from bubblelab.profiling import analysis, overview
from bubblelab.profiling.ingest import plain_sqlite
from bubblelab.runs.assemble import nsys_reports
from bubblelab.runs.rundir import read_results, results_path
from bubblelab.runs.sources import run_catalog
from bubblelab.runs.sweep import SweepSpec, run_sweep


def report_facts(trace: Path) -> dict[str, Any]:
    """What one nsys report holds, per GPU and per process, straight from its tables (the sweep
    keeps its exports gzipped)."""
    with plain_sqlite(trace) as plain:
        return _facts(plain)


def _facts(trace: Path) -> dict[str, Any]:
    db = sqlite3.connect(f"{trace.resolve().as_uri()}?mode=ro", uri=True)
    q = lambda sql: [list(r) for r in db.execute(sql).fetchall()]  # noqa: E731
    pid = "(globalTid >> 24) & 16777215"
    facts: dict[str, Any]
    try:
        facts = {
            "kernels_per_device": q(
                "SELECT deviceId, count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY 1 ORDER BY 1"
            ),
            "nccl_kernels_per_device": q(
                "SELECT k.deviceId, count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s "
                "ON s.id = k.shortName WHERE s.value LIKE '%nccl%' GROUP BY 1 ORDER BY 1"
            ),
            "nvtx_ranges_per_pid": q(
                f"SELECT {pid}, count(*) FROM NVTX_EVENTS WHERE eventType = 59 "
                "GROUP BY 1 ORDER BY 1"
            ),
        }
    except sqlite3.Error as e:
        facts = {"error": str(e)}
    finally:
        db.close()
    return facts


def log_tails(run_dir: Path, lines: int = 40) -> dict[str, str]:
    """The last lines of every log of a failed sweep (nsys's, each pass's worker's), by path."""
    return {
        str(log.relative_to(run_dir)): "\n".join(
            log.read_text(errors="replace").splitlines()[-lines:]
        )
        for log in sorted(run_dir.rglob("*.log"))
    }


def compact(tp: dict) -> dict:
    """A TP run's analysis without its per-step rows (results.json keeps those)."""
    return {k: v for k, v in tp.items() if k != "steps"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen3-0.6b")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--no-nsys", action="store_true", help="the unprofiled pass only")
    ap.add_argument("--max-model-len", type=int, default=512)
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--streams", default="8")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--output-len-mean", type=float, default=32)
    ap.add_argument("--requests-per-stream", type=int, default=3)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/tp-nsys"))
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    spec = SweepSpec(
        model=args.model, device=args.device, depths=[1, 2],
        streams=[int(s) for s in args.streams.split(",")], output_len_mean=args.output_len_mean,
        requests_per_stream=args.requests_per_stream, repeats=args.repeats, nsys_repeats=1,
        max_model_len=args.max_model_len, tensor_parallel=args.tp,
    )  # fmt: skip
    report: dict = {"tp": args.tp, "model": args.model, "run_dir": str(args.dir)}
    try:
        run_sweep(spec, args.dir, use_nsys=not args.no_nsys, force=True, say=print)
    except BubblelabError as e:
        report["sweep_error"] = str(e)
        # the run directory stays on the GPU machine; a sweep that finished nothing is removed,
        # its logs kept in one file the error names
        report["logs"] = log_tails(args.dir)
        if kept := re.search(r"its logs: (\S+)\)", str(e)):
            text = Path(kept.group(1)).read_text(errors="replace").splitlines()
            report["logs"][kept.group(1)] = "\n".join(text[-80:])
    reports = {p.name: report_facts(p) for p in nsys_reports(args.dir)}
    report["nsys_reports"] = reports
    report["every_rank_captured"] = bool(reports) and all(
        len(r.get("kernels_per_device", [])) == args.tp
        and len(r.get("nvtx_ranges_per_pid", [])) == args.tp
        for r in reports.values()
    )
    if results_path(args.dir) is not None:
        con = run_catalog(args.dir)
        try:
            runs = analysis.runs(con)
            report["runs"] = runs[["run_id", "source", "depth", "tensor_parallel", "rank"]].to_dict(
                "records"
            )
            report["tensor_parallel"] = [
                compact(tp) for tp in overview.analyze(con)["tensor_parallel"]
            ]
        finally:
            con.close()
        results = read_results(args.dir)
        table = predict_runs(results.runs, results.steps, results.requests, ranks=results.ranks)
        report["predictions"] = json.loads(table.to_json(orient="records"))
        plain = results_path(args.dir)
        assert plain is not None
        keep = args.out.with_name(args.out.stem + "-results.json.gz")
        write_atomic(keep, gzip.compress(plain.read_bytes()))
    write_atomic(args.out, json.dumps(report, indent=1, default=str))
    print(
        json.dumps(
            {k: report.get(k) for k in ("sweep_error", "every_rank_captured", "nsys_reports")},
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
