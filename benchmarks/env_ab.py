"""The engine under several environments, each in fresh depth_sweep processes taken in turn.

Some engine choices are read once a process (BUBBLELAB_PDL, BUBBLELAB_PDL_EARLY,
BUBBLELAB_GEMM_TABLE, BUBBLELAB_FUSE), and a forward timed alone has disagreed with the engine on
them (docs/engine-speed.md). So their A/B runs the engine itself: per round, one `depth_sweep`
process per variant with the same arguments and the variant's environment, the order reversed every
other round (ABBA) so that a machine warming or cooling in the call favours none. Per variant,
preset, stream count and depth it gives tokens/s and the forward of every repeat of every process,
the median and range, and the median's ratio to the first variant's. A deadline stops starting
processes; what ran is summarised, and `--summarise DIR` does it again from what a run left, on
any machine.

    python -m benchmarks.env_ab --variant base --variant norm BUBBLELAB_PDL_EARLY=attention,norm \\
        --rounds 2 --deadline-s 450 --out DIR -- --presets qwen3-8b --streams 1 --repeats 2 --L 110
    python -m benchmarks.env_ab --summarise DIR
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bubblelab.core.files import write_atomic


def parse_variant(words: list[str]) -> tuple[str, dict[str, str]]:
    """['name', 'K=V', ...] -> (name, {K: V}); the name alone is the environment as it is."""
    name, *assignments = words
    if "=" in name or "/" in name or not name:
        raise ValueError(f"a variant starts with its name, got {name!r}")
    env = {}
    for a in assignments:
        key, sep, value = a.partition("=")
        if not sep or not key:
            raise ValueError(f"variant {name}: expected NAME=VALUE, got {a!r}")
        env[key] = value
    return name, env


def round_order(names: list[str], r: int) -> list[str]:
    """Round r's order: as given on even rounds, reversed on odd ones."""
    return names if r % 2 == 0 else names[::-1]


def run(
    variants: dict[str, dict[str, str]],
    sweep_args: list[str],
    out: Path,
    rounds: int,
    deadline_s: float,
) -> str | None:
    """The processes, into out/<variant>-<round>/ with their output in out/<variant>-<round>.log;
    the first failure ends the run, and its message is returned."""
    if "--out" in sweep_args:
        sys.exit("give --out to env_ab, not to depth_sweep: each process writes its own folder")
    out.mkdir(parents=True, exist_ok=True)
    plan = {"variants": variants, "sweep_args": sweep_args, "rounds": rounds}
    write_atomic(out / "variants.json", json.dumps(plan, indent=1) + "\n")
    t0 = time.monotonic()
    for r in range(rounds):
        for name in round_order(list(variants), r):
            if time.monotonic() - t0 > deadline_s:
                print(f"deadline: stopped before {name} round {r}", file=sys.stderr)
                return None
            tag = f"{name}-{r}"
            cmd = [sys.executable, "-m", "benchmarks.depth_sweep", *sweep_args]
            cmd += ["--out", str(out / tag)]
            done = subprocess.run(
                cmd, env=os.environ | variants[name], capture_output=True, text=True
            )
            write_atomic(out / f"{tag}.log", done.stdout + done.stderr)
            took = time.monotonic() - t0
            print(f"{tag}: exit {done.returncode} at {took:.0f} s", file=sys.stderr, flush=True)
            if done.returncode != 0:
                return f"{tag} failed (exit {done.returncode}):\n{done.stderr[-2000:]}"
    return None


def summarise(out: Path) -> dict[str, Any]:
    """Every finished process's runs, grouped by variant, preset, streams and depth."""
    plan = json.loads((out / "variants.json").read_text())
    names = list(plan["variants"])
    groups: dict[tuple[str, str, int, int], dict[str, list[float]]] = {}
    processes = {name: 0 for name in names}
    for name in names:
        for r in range(plan["rounds"]):
            for path in sorted((out / f"{name}-{r}").glob("engine-*.json")):
                report = json.loads(path.read_text())
                processes[name] += 1
                for run_ in report["runs"]:
                    key = (name, report["preset"], run_["streams"], run_["depth"])
                    g = groups.setdefault(key, {"tokens_per_s": [], "forward_ms": []})
                    g["tokens_per_s"].append(run_["tokens_per_s"])
                    g["forward_ms"].append(run_["forward_ms"])
    rows = []
    for (name, preset, streams, depth), g in sorted(groups.items(), key=lambda kv: kv[0][1:]):
        tps = g["tokens_per_s"]
        median = statistics.median(tps)
        row: dict[str, Any] = {
            "variant": name,
            "preset": preset,
            "streams": streams,
            "depth": depth,
            "runs": len(tps),
            "tokens_per_s": round(median, 2),
            "tokens_per_s_range": [round(min(tps), 2), round(max(tps), 2)],
            "forward_ms": round(statistics.median(g["forward_ms"]), 4),
        }
        first = groups.get((names[0], preset, streams, depth))
        if first is not None:
            row["vs_first"] = round(median / statistics.median(first["tokens_per_s"]), 4)
        rows.append(row)
    return {"variants": plan["variants"], "processes": processes, "rows": rows}


def summary_lines(summary: dict[str, Any]) -> list[str]:
    lines = []
    for row in summary["rows"]:
        lo, hi = row["tokens_per_s_range"]
        ratio = f"  x{row['vs_first']:.4f}" if "vs_first" in row else ""
        lines.append(
            f"{row['preset']} streams {row['streams']} depth {row['depth']} {row['variant']}: "
            f"{row['tokens_per_s']:.1f} tok/s [{lo:.1f}-{hi:.1f}] over {row['runs']} runs, "
            f"forward {row['forward_ms']:.4f} ms{ratio}"
        )
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--variant",
        action="append",
        nargs="+",
        metavar="NAME [K=V ...]",
        help="a name, then its environment (at least two variants; the first is the baseline)",
    )
    ap.add_argument("--rounds", type=int, default=2, help="processes a variant, in ABBA order")
    ap.add_argument("--deadline-s", type=float, default=float("inf"))
    ap.add_argument("--out", type=Path, help="a folder for the processes' output")
    ap.add_argument("--summarise", type=Path, help="summarise this finished run instead")
    ap.add_argument("sweep_args", nargs=argparse.REMAINDER, help="after --: depth_sweep's options")
    args = ap.parse_args()
    failed = None
    if args.summarise is not None:
        out = args.summarise
    else:
        if args.out is None or not args.variant or len(args.variant) < 2:
            sys.exit("give --out and at least two --variant")
        try:
            variants = dict(parse_variant(v) for v in args.variant)
        except ValueError as e:
            sys.exit(str(e))
        if len(variants) != len(args.variant):
            sys.exit("two variants share a name")
        out = args.out
        sweep_args = [a for a in args.sweep_args if a != "--"]
        failed = run(variants, sweep_args, out, args.rounds, args.deadline_s)
    summary = summarise(out)
    for line in summary_lines(summary):
        print(line, file=sys.stderr)
    write_atomic(out / "summary.json", json.dumps(summary, indent=1) + "\n")
    if failed:  # what ran before it is summarised above
        sys.exit(failed)


if __name__ == "__main__":
    main()
