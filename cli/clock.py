"""The command's own clock. `run-and-profile` says how long it took; counted from main() it left
out the interpreter's start and the imports before main (it said 291 s where the shell measured
309.6 s on an H100 machine: docs/measurements/2026-11-27/sweep-time/sweep-time.log). A command
run from the shell counts from the process's start, as the shell's `time` does; main() called
in-process (tests, notebooks) counts from that call.
"""

from __future__ import annotations

import os
import time

_zero: float | None = None  # time.perf_counter() at the clock's zero


def start(from_process_start: bool) -> None:
    """Set the clock's zero: the process's start where the OS tells it (Linux), else now."""
    global _zero
    age = process_age_s() if from_process_start else None
    _zero = time.perf_counter() - (age or 0.0)


def elapsed() -> float:
    """Seconds since the clock's zero (started now if nothing started it)."""
    if _zero is None:
        start(from_process_start=False)
    assert _zero is not None
    return time.perf_counter() - _zero


def process_age_s() -> float | None:
    """Seconds since this process started, from /proc (10 ms ticks); None where there is none."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # the name in () may hold spaces
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22, starttime
    except (OSError, ValueError, IndexError):
        return None
    return max(0.0, uptime - started)
