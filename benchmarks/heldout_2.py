"""The cost model's second held-out set on one GPU: every sweep of benchmarks/heldout_2.json, each
a run-and-profile (unprofiled repeat pairs until the speedup is known to ±1 point or the
configuration's budget is spent, then its first depth-1 run under nsys), into OUT/<sweep name>/.

    python -m benchmarks.heldout_2 --out $OUT                    # one GPU: ~10 configurations
    python -m benchmarks.heldout_2 --device cpu --tiny --out /tmp/h2   # the same path on the CPU

Run it once on each GPU (H100 and H200), then `python -m benchmarks.heldout_2_table --run H100=DIR
--run H200=DIR` makes the published table. A sweep already in OUT is resumed (only what is missing
runs), so a cut-short call is finished by running the same command again. `--stop-after-s T` starts
no sweep that the slowest sweep so far says would end past T seconds (a GPU call's limit), so a call
ends between sweeps rather than inside one; the next call resumes. --tiny swaps every model
for the tiny-llama preset and shrinks streams, lengths and the budget: a check that the path works,
not a measurement.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from bubblelab.runs.state import read_state
from bubblelab.runs.sweep import SweepSpec, run_sweep

SET = Path(__file__).with_name("heldout_2.json")
TINY = dict(model="tiny-llama", output_len_mean=24, prompt_len=8, requests_per_stream=2,
            max_model_len=128)  # fmt: skip


def specs(
    held_out: dict,
    device: str,
    tiny: bool = False,
    budget_s: float | None = None,
    max_pairs: int | None = None,
) -> dict[str, SweepSpec]:
    """name -> the sweep's options, checked (SweepSpec) before anything runs."""
    out = {}
    for sweep in held_out["sweeps"]:
        # A set runs by the repeat rule it was committed with: one that names no out_of_reach
        # stop predates it, and spends its budget.
        options = {"out_of_reach": False, **sweep["options"], **held_out["repeats"]}
        options["device"] = device
        if budget_s is not None:
            options["budget_s"] = budget_s
        if max_pairs is not None:
            options["repeats"] = max_pairs
        if tiny:  # the same path on the CPU in seconds: small, few, short
            options |= TINY | dict(streams=sorted({min(s, 3) for s in options["streams"]}),
                                   repeats=2, min_repeats=2, budget_s=0.0)  # fmt: skip
        out[sweep["name"]] = SweepSpec(**options, nsys_depths=[1])
    return out


def run(held_out: dict, out: Path, device: str, *, nsys: bool | None, tiny: bool = False,
        budget_s: float | None = None, only: list[str] | None = None,
        max_pairs: int | None = None, stop_after_s: float | None = None) -> dict:  # fmt: skip
    """Every sweep of the set (or `only` those) into out/<name>/; returns each one's seconds.
    stop_after_s: no sweep starts that the slowest one so far says would end past it."""
    seconds: dict[str, float] = {}
    began = time.perf_counter()
    for name, spec in specs(held_out, device, tiny, budget_s, max_pairs).items():
        if only and name not in only:
            continue
        slowest = max(seconds.values(), default=0.0)
        if stop_after_s is not None and time.perf_counter() - began + slowest > stop_after_s:
            print(f"== {name}: not started, ~{slowest:.0f} s more would pass --stop-after-s "
                  f"{stop_after_s:.0f}; the same command resumes the set", flush=True)  # fmt: skip
            continue
        target = out / name
        resume = read_state(target) is not None
        print(f"== {name} ({'resumed' if resume else 'new'}): {target}", flush=True)
        started = time.perf_counter()
        run_sweep(spec, target, use_nsys=nsys, resume=resume,
                  say=lambda line: print(f"   {line}", flush=True))  # fmt: skip
        seconds[name] = time.perf_counter() - started
        print(f"   {seconds[name]:.0f} s", flush=True)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--set", type=Path, default=SET, help="the held-out set (JSON)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--budget-s", type=float, help="per configuration (default: the set's)")
    parser.add_argument(
        "--max-pairs", type=int, help="repeat pairs a configuration at most (default: the set's)"
    )
    parser.add_argument("--only", help="comma-separated sweep names")
    parser.add_argument("--nsys", action=argparse.BooleanOptionalAction, default=None,
                        help="force or forbid nsys (default: use it when found)")  # fmt: skip
    parser.add_argument("--tiny", action="store_true", help="tiny-llama, for a CPU check")
    parser.add_argument("--stop-after-s", type=float,
                        help="start no sweep that would end past this many seconds")  # fmt: skip
    args = parser.parse_args()
    held_out = json.loads(args.set.read_text())
    started = time.perf_counter()
    only = args.only.split(",") if args.only else None
    seconds = run(held_out, args.out, args.device, nsys=args.nsys, tiny=args.tiny,
                  budget_s=args.budget_s, only=only, max_pairs=args.max_pairs,
                  stop_after_s=args.stop_after_s)  # fmt: skip
    total = time.perf_counter() - started
    print(f"{len(seconds)} sweeps in {total:.0f} s: " + ", ".join(
        f"{name} {s:.0f} s" for name, s in seconds.items()))  # fmt: skip


if __name__ == "__main__":
    main()
