"""`run-and-profile`'s "took N s" counts what the shell's `time` counts: the clock starts with the
process, not after the imports (it said 291 s where the shell measured 309.6 s)."""

from __future__ import annotations

import subprocess
import sys
import time

from bubblelab.cli import clock


def test_the_process_age_counts_from_the_process_start():
    code = "import time; time.sleep(0.6); from bubblelab.cli.clock import process_age_s; "
    code += "print(process_age_s())"
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    wall = time.perf_counter() - started
    age = float(out.stdout)
    assert 0.55 <= age <= wall + 0.05  # the sleep and the interpreter's start; 10 ms ticks


def test_in_process_the_clock_counts_from_main():
    clock.start(from_process_start=False)
    assert clock.elapsed() < 0.5
    clock.start(from_process_start=True)  # this pytest process is older than its first test
    age = clock.process_age_s()
    assert age is not None and clock.elapsed() >= age - 0.05
    clock.start(from_process_start=False)  # as main() in a test leaves it
