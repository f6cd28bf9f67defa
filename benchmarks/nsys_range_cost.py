"""What a capture range's end costs the profiled app under `nsys --capture-range-end=repeat`, by
option set and by how much the range held (issue #25 item 6: why a sweep's nsys pass is one range).

    python -m benchmarks.nsys_range_cost --out nsys-range-cost.json

For each option set and each size the parent runs `nsys profile OPTIONS python -m
benchmarks.nsys_range_cost --child REPLAYS`. The child captures a 300-kernel CUDA graph, then opens
and closes three ranges, each around REPLAYS replays of it, and prints the seconds
cudaProfilerStart, the replays and cudaProfilerStop took on the app's thread.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bubblelab.core.files import write_atomic

BASE = "-s none --cpuctxsw=none --capture-range=cudaProfilerApi --capture-range-end=repeat".split()
OPTION_SETS = {
    "the sweep's (node trace, SQLite export)": "-t cuda,nvtx --cuda-graph-trace=node "
    "--export sqlite",
    "node trace, no export": "-t cuda,nvtx --cuda-graph-trace=node",
    "node trace, no flush on stop": "-t cuda,nvtx --cuda-graph-trace=node "
    "--flush-on-cudaprofilerstop=false",
    "graph trace": "-t cuda,nvtx --cuda-graph-trace=graph",
    "NVTX only": "-t nvtx",
}
SIZES = (50, 1000)  # replays a range: 15 thousand and 300 thousand kernels
LINE = re.compile(r"^range (\d+): start ([\d.]+) s, work ([\d.]+) s, stop ([\d.]+) s$")


def child(replays: int) -> None:
    import torch

    x = torch.randn(256, 256, device="cuda")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):  # warm the kernel before capturing it
        y = x * 1.0001
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = x
        for _ in range(300):
            y = y * 1.0001
    graph.replay()
    torch.cuda.synchronize()
    for r in range(3):
        t0 = time.perf_counter()
        torch.cuda.profiler.start()
        t1 = time.perf_counter()
        for _ in range(replays):
            graph.replay()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        torch.cuda.profiler.stop()
        t3 = time.perf_counter()
        print(f"range {r}: start {t1 - t0:.3f} s, work {t2 - t1:.3f} s, stop {t3 - t2:.3f} s")
        time.sleep(1.0)  # nsys writes the range's report meanwhile


def measure(options: str, replays: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        app = [sys.executable, "-m", "benchmarks.nsys_range_cost", "--child", str(replays)]
        cmd = ["nsys", "profile", *BASE, *options.split(), "-o", f"{tmp}/r",
               "--force-overwrite", "true", *app]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    ranges = [m.groups() for line in done.stdout.splitlines() if (m := LINE.match(line.strip()))]
    return {
        "replays": replays,
        "kernels_per_range": 300 * replays,
        "ranges": [
            {"start_s": float(a), "work_s": float(w), "stop_s": float(z)} for _, a, w, z in ranges
        ],  # fmt: skip
        "returncode": done.returncode,
        "note": None if len(ranges) == 3 else done.stdout[-400:] + done.stderr[-400:],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child)
        return
    results = []
    for name, options in OPTION_SETS.items():
        for replays in SIZES:
            row = {"options": name, "nsys_options": options, **measure(options, replays)}
            stops = ", ".join(f"{r['stop_s']:.2f}" for r in row["ranges"]) or "none"
            print(f"{name}, {replays} replays: stop {stops} s", flush=True)
            results.append(row)
    if args.out is not None:
        write_atomic(args.out, json.dumps({"base": " ".join(BASE), "rows": results}, indent=1))


if __name__ == "__main__":
    main()
