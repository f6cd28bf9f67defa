"""How steady is this machine's CPU? A fixed pure-Python workload (the kind of work a depth-1 step
puts on the critical path: small objects, dicts, lists, calls), timed again and again in one
process with nothing else running; its spread is the host's, not any engine's (issue #25 item 1).

    python -m benchmarks.host_speed --repeats 60 --out host-speed.json

Each repeat runs the same work; the JSON holds every time, the median, the CV and the worst repeat's
distance from the median, with the CPU model, its frequency governor and the load average. Beside
each time it keeps what could explain a slow one: the process's own CPU time (less than the wall
clock when it was not running), the CPU it ended on, and the ticks the machine spent in steal (a
guest's vCPU waiting for the hypervisor), on every CPU and on that one (/proc/stat).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

from bubblelab.core.files import write_atomic


def workload(n: int) -> int:
    """Bookkeeping-shaped work: build records, look them up, sort, sum."""
    table: dict[int, dict[str, Any]] = {
        i: {"id": i, "tokens": [i, i + 1], "done": i % 7 == 0} for i in range(n)
    }
    alive = [r for r in table.values() if not r["done"]]
    alive.sort(key=lambda r: -r["tokens"][0])
    return sum(len(r["tokens"]) for r in alive)


def steal_ticks() -> dict[str, int]:
    """Steal ticks so far per CPU ("cpu": all of them), from /proc/stat ({} where there is none)."""
    try:
        lines = Path("/proc/stat").read_text().splitlines()
    except OSError:
        return {}
    # cpuN user nice system idle iowait irq softirq steal ...
    return {f[0]: int(f[8]) for f in (ln.split() for ln in lines) if f[0].startswith("cpu")}


def this_cpu() -> int | None:
    """The CPU this process last ran on (/proc/self/stat's processor field)."""
    try:
        return int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[36])
    except (OSError, IndexError, ValueError):
        return None


def cpu_facts() -> dict:
    def read(path: str) -> str | None:
        try:
            return Path(path).read_text().strip()
        except OSError:
            return None

    model = next(
        (ln.split(":", 1)[1].strip() for ln in (read("/proc/cpuinfo") or "").splitlines()
         if ln.startswith("model name")),
        platform.processor(),
    )  # fmt: skip
    return {
        "cpu": model,
        "cpus": os.cpu_count(),
        "governor": read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"),
        "loadavg": read("/proc/loadavg"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=40)
    ap.add_argument("--n", type=int, default=300_000, help="records a repeat (~0.2 s)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    workload(args.n)  # warm: allocator arenas, code objects
    times, cpu_s, steal, steal_here, cpus = [], [], [], [], []
    for _ in range(args.repeats):
        before, c = steal_ticks(), time.process_time()
        t = time.perf_counter()
        workload(args.n)
        times.append(time.perf_counter() - t)
        cpu_s.append(time.process_time() - c)
        after, cpu = steal_ticks(), this_cpu()
        cpus.append(cpu)
        steal.append(after.get("cpu", 0) - before.get("cpu", 0))
        here = f"cpu{cpu}"
        steal_here.append(after.get(here, 0) - before.get(here, 0))
    median = statistics.median(times)
    result = {
        **cpu_facts(),
        "repeats": len(times),
        "n": args.n,
        "median_s": median,
        "cv_pct": 100 * statistics.stdev(times) / statistics.mean(times),
        "worst_off_pct": 100 * max(abs(t - median) for t in times) / median,
        "times_s": times,
        "cpu_s": cpu_s,  # the process's CPU time in each repeat
        "steal_ticks": steal,  # every CPU's, in each repeat (USER_HZ, usually 100 a second)
        "steal_ticks_here": steal_here,  # the CPU the repeat ended on
        "cpus": cpus,
        "steal_total": sum(steal),
    }
    write_atomic(args.out, json.dumps(result, indent=1))
    print({k: v for k, v in result.items() if not isinstance(v, list)})


if __name__ == "__main__":
    main()
