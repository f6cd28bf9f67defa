"""Run-to-run variance (runs.variance, benchmarks/variance.py): repeats interleaved, a CV per
configuration, and a repeat made slow on purpose found and its lost time located."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from bubblelab.runs import driver, variance
from bubblelab.runs.workload import WorkloadSpec
from tests.engine_helpers import make_engine

ROOT = Path(__file__).parents[1]


def test_a_slow_repeat_is_found_and_its_lost_time_located(tiny_qwen3, monkeypatch):
    calls = []

    def slowed(engine, spec, **kwargs):
        calls.append((spec.streams, engine.config.depth))
        if len(calls) != 6:
            return driver.run_workload(engine, spec, **kwargs)
        # Repeat 1 (its depths reversed), 1 stream, depth 1: one step 1 s late.
        step, late = engine.step, []

        def one_late_step():
            if len(late) == 10:
                time.sleep(1.0)
            late.append(1)
            return step()

        engine.step = one_late_step
        try:
            return driver.run_workload(engine, spec, **kwargs)
        finally:
            del engine.step

    monkeypatch.setattr(variance, "run_workload", slowed)
    workloads = {s: WorkloadSpec(streams=s, requests=4 * s, output_len_mean=6, prompt_len=4)
                 for s in (1, 2)}  # fmt: skip
    runs, repeats = variance.measure(make_engine(tiny_qwen3), workloads, [1, 2], 3)
    # Repeat-major, stream counts in turn, the depth order alternating between repeats.
    assert repeats == 3 and calls == [
        (1, 1), (1, 2), (2, 1), (2, 2), (1, 2), (1, 1), (2, 2), (2, 1),
        (1, 1), (1, 2), (2, 1), (2, 2),
    ]  # fmt: skip
    slow = variance.configuration(1, 1, runs[1, 1])
    assert len(slow["walls_s"]) == 3 and slow["cv"] > 0.01 and not slow["met"]
    (found,) = [o for o in slow["outliers"] if o["repeat"] == 1]
    assert found["off"] > 0.03
    diff = found["against_median_repeat"]
    # The same requests, the same steps: the late one is named, and the GPU idled for it.
    assert diff["steps"][0] == diff["steps"][1]
    assert diff["worst_steps"][0]["period_ms"] > 800 and diff["worst_5_share"] > 0.7
    assert diff["parts_extra_ms"]["gpu idle"] > 800
    assert any("over 3x the run's median" in f for f in found["region"]["timing_flags"])
    doc = {"model": "tiny-qwen3", "device": "cpu", "machine": {}, "repeats_run": 3, "met": False,
           "configurations": [slow]}  # fmt: skip
    table = variance.markdown(doc)
    assert "| 1 | 1 |" in table and "r1 +" in table and "targets missed" in table


def test_the_benchmark_runs_as_a_user_runs_it(tmp_path):
    args = ["--device", "cpu", "--model", "tiny-qwen3", "--streams", "1,2", "--repeats", "2",
            "--output-len", "4", "--decode-steps", "8", "--keep-records",
            "--out", str(tmp_path)]  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "benchmarks.variance", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    doc = json.loads((tmp_path / "variance.json").read_text())
    assert doc["repeats_run"] == 2 and len(doc["configurations"]) == 4
    assert all(len(c["walls_s"]) == 2 and c["cv"] >= 0 for c in doc["configurations"])
    assert (tmp_path / "variance.md").read_text() in done.stdout
    assert len(list((tmp_path / "runs").glob("s*-d*-r*.json"))) == 8
