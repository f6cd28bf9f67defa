"""benchmarks.pdl_ab in several fresh processes, one after another, and what moves between them.

pdl_ab's paired ranges are one process's: on an H200 the PDL-off one-row step of qwen3-4b was
2.64-2.79 ms from one process to the next (5.7%) while each process's rounds agreed within ~0.1%
(docs/engine-speed.md), so a change judged in one process can read anywhere in that band. This runs
`pdl_ab` N times, each a new interpreter with the same arguments, and gives per preset, batch and
mode each process's median step, their median and spread, and each process's paired speedup over
the first mode: a difference that holds in every process is a result, one that changes sign is not.

    python -m benchmarks.pdl_processes --processes 4 --out pdl-4p.json -- \\
        --presets qwen3-4b --batches 1,4 --modes off,engine --aa
    python -m benchmarks.pdl_processes --merge p0.json p1.json --out merged.json  # any machine
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bubblelab.core.files import write_atomic


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--processes", type=int, default=3, help="fresh pdl_ab processes, in turn")
    ap.add_argument("--merge", nargs="+", type=Path, help="merge these pdl_ab outputs instead")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("pdl_ab_args", nargs=argparse.REMAINDER, help="after --: pdl_ab's options")
    args = ap.parse_args()
    if args.merge:
        docs = [json.loads(p.read_text()) for p in args.merge]
    else:
        if args.processes < 2:
            sys.exit("--processes must be at least 2 (one process is pdl_ab itself)")
        docs = run_processes(args.processes, [a for a in args.pdl_ab_args if a != "--"])
    merged = merge(docs)
    for line in summary_lines(merged):
        print(line, file=sys.stderr)
    text = json.dumps(merged, indent=2)
    print(text)
    if args.out is not None:
        write_atomic(args.out, text + "\n")


def run_processes(n: int, pdl_ab_args: list[str]) -> list[dict]:
    """pdl_ab `n` times, each in a new interpreter writing its own JSON; a failed process ends the
    run with its exit status and the tail of its output."""
    if "--out" in pdl_ab_args:
        sys.exit("give --out to pdl_processes, not to pdl_ab: each process writes its own file")
    docs = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(n):
            out = Path(tmp) / f"p{i}.json"
            command = [sys.executable, "-m", "benchmarks.pdl_ab", *pdl_ab_args, "--out", str(out)]
            print(f"process {i + 1} of {n}: {' '.join(command[1:])}", file=sys.stderr, flush=True)
            done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  text=True)  # fmt: skip
            if done.returncode != 0:
                tail = " | ".join(done.stderr.strip().splitlines()[-3:])
                sys.exit(f"pdl_ab process {i + 1} failed (exit {done.returncode}): {tail}")
            docs.append(json.loads(out.read_text()))
    return docs


def merge(docs: list[dict]) -> dict[str, Any]:
    """Per preset, batch and mode: each process's median step (ms) and paired speedup over the
    first mode, their median, and their spread ((max - min) / median, %). Processes must have run
    the same presets, batches and modes on one kind of GPU."""
    devices = sorted({d["device"] for d in docs})
    if len(devices) != 1:
        raise SystemExit(f"the processes ran on different GPUs: {devices}")
    layout = [{p: sorted(rows) for p, rows in d["presets"].items()} for d in docs]
    if any(x != layout[0] for x in layout):
        raise SystemExit("the processes ran different presets or batches: merge like with like")
    presets: dict[str, Any] = {}
    for preset, rows in docs[0]["presets"].items():
        presets[preset] = {}
        for key, first in rows.items():
            if not key.startswith("batch_"):
                continue
            each = [d["presets"][preset][key] for d in docs]
            if any(modes(r) != modes(first) for r in each):
                raise SystemExit(f"{preset} {key}: the processes timed different PDL modes")
            row: dict[str, Any] = {"identical_logits": all(r["identical_logits"] for r in each),
                                   "weight_floor_ms": first["weight_floor_ms"]}  # fmt: skip
            for mode in modes(first):
                row[mode] = spread([r[f"{mode}_ms"] for r in each], "ms")
                if f"{mode}_speedup" in first:
                    row[mode]["speedup"] = spread([r[f"{mode}_speedup"] for r in each], "x")
            presets[preset][key] = row
    return {"device": docs[0]["device"], "torch": docs[0].get("torch"), "processes": len(docs),
            "arguments": {k: docs[0].get(k) for k in ("context", "rounds", "replays")},
            "presets": presets}  # fmt: skip


def summary_lines(merged: dict) -> list[str]:
    """A line per preset, batch and mode, e.g. "qwen3-4b batch 1 engine: 2.604 ms (spread 2.3%
    over 4 processes), 1.067x the first mode (1.016-1.081)"."""
    lines = []
    for preset, rows in merged["presets"].items():
        for key, row in rows.items():
            for mode, m in row.items():
                if not isinstance(m, dict):
                    continue
                n = merged["processes"]
                line = (f"{preset} {key.replace('_', ' ')} {mode}: {m['median']:.3f} ms "
                        f"(spread {m['spread_pct']:.1f}% over {n} processes)")  # fmt: skip
                if "speedup" in m:
                    x = m["speedup"]
                    line += f", {x['median']:.3f}x the first mode ({min(x['each']):.3f}-"
                    line += f"{max(x['each']):.3f})"
                lines.append(line)
    return lines


def modes(row: dict) -> list[str]:
    """The modes a pdl_ab row timed, in its order (the first is the reference)."""
    return [k.removesuffix("_ms") for k in row
            if k.endswith("_ms") and not k.endswith(("_range_ms", "floor_ms"))]  # fmt: skip


def spread(values: list[float], unit: str) -> dict[str, Any]:
    middle = statistics.median(values)
    return {"each": values, "median": round(middle, 4), "unit": unit,
            "spread_pct": round((max(values) - min(values)) / middle * 100, 2)}  # fmt: skip


if __name__ == "__main__":
    main()
