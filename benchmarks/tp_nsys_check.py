"""Does an nsys capture of a tensor-parallel run hold every rank? One run-and-profile worker run at
TP N under nsys (the sweep's own profile options), then, from the SQLite export: kernels per GPU,
our NVTX ranges per process, and each GPU's kernel window (cudaProfilerStart/Stop on every rank).

The workers are started with multiprocessing's spawn (fork + exec), which nsys follows by default;
only fork without exec needs --trace-fork-before-exec=true.

    python -m benchmarks.tp_nsys_check --model qwen3-0.6b --tp 2 --out $OUT/tp-nsys-check.json
"""

from __future__ import annotations

import argparse
import json
import sqlite3
from pathlib import Path

from bubblelab.files import write_atomic
from bubblelab.profiling.nsys import export_path, run_under_nsys


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen3-0.6b")
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/tp-nsys"))
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    config = {
        "engine": dict(model=args.model, device="cuda", dtype="bf16", depth=2, max_num_seqs=8,
                       max_model_len=256, tensor_parallel=args.tp, num_kv_blocks=512),
        "workload": dict(streams=8, requests=8, output_len_mean=32, prompt_len=32),
        "nvtx": True, "profile": True, "out_json": str(args.dir / "run.json"),
    }  # fmt: skip
    write_atomic(args.dir / "config.json", json.dumps(config))
    argv = ["python3", "-m", "bubblelab.runs.worker", str(args.dir / "config.json")]
    run_under_nsys(args.dir / "tp", argv, timeout=300)
    db = sqlite3.connect(export_path(args.dir / "tp"))
    q = lambda sql: [list(r) for r in db.execute(sql).fetchall()]  # noqa: E731
    pid = "(globalTid >> 24) & 16777215"
    report = {
        "kernels_per_device": q(
            "SELECT deviceId, count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY 1 ORDER BY 1"
        ),
        "nvtx_ranges_per_pid": q(f"SELECT {pid}, count(*) FROM NVTX_EVENTS GROUP BY 1 ORDER BY 1"),
        "kernel_window_per_device_ms": q(
            "SELECT deviceId, (max(end) - min(start)) / 1e6 "
            "FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY 1"
        ),
        "nccl_kernels_per_device": q(
            "SELECT k.deviceId, count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s "
            "ON s.id = k.shortName WHERE s.value LIKE '%nccl%' GROUP BY 1"
        ),
        "run_summary": json.loads((args.dir / "run.json").read_text())["summary"],
    }
    report["every_rank_captured"] = (
        len(report["kernels_per_device"]) == args.tp
        and len(report["nvtx_ranges_per_pid"]) == args.tp
    )
    write_atomic(args.out, json.dumps(report, indent=1))
    print(json.dumps({k: v for k, v in report.items() if k != "run_summary"}, indent=1))


if __name__ == "__main__":
    main()
