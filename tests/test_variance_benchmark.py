"""benchmarks/variance.py on the CPU: repeats interleaved, CV per configuration, and a repeat made
slow on purpose found and explained from its timeline."""

from __future__ import annotations

import json
import sys
import time

from benchmarks import variance
from bubblelab.runs import driver


def test_a_slow_repeat_is_found_and_its_lost_time_located(tmp_path, monkeypatch):
    calls = []

    def slowed(engine, spec, **kwargs):
        calls.append((spec.streams, engine.config.depth))
        if len(calls) == 6:  # repeat 1 (depths reversed), 1 stream, depth 1: one step 1 s late
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
        return driver.run_workload(engine, spec, **kwargs)

    monkeypatch.setattr(variance, "run_workload", slowed)
    argv = ["variance", "--device", "cpu", "--model", "tiny-qwen3", "--streams", "1,2",
            "--repeats", "3", "--output-len", "6", "--decode-steps", "24",
            "--out", str(tmp_path)]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    variance.main()
    # Repeat-major, stream counts in turn, the depth order alternating between repeats.
    assert calls == [(1, 1), (1, 2), (2, 1), (2, 2), (1, 2), (1, 1), (2, 2), (2, 1),
                     (1, 1), (1, 2), (2, 1), (2, 2)]  # fmt: skip
    doc = json.loads((tmp_path / "variance.json").read_text())
    assert doc["repeats_run"] == 3 and not doc["met"]
    configs = {(c["streams"], c["depth"]): c for c in doc["configurations"]}
    assert set(configs) == {(1, 1), (1, 2), (2, 1), (2, 2)}
    slow = configs[1, 1]
    assert len(slow["walls_s"]) == 3 and slow["cv"] > 0.01
    (found,) = [o for o in slow["outliers"] if o["repeat"] == 1]
    assert found["off"] > 0.03
    diff = found["against_median_repeat"]
    # The same requests, the same steps: the late one is named, and the GPU idled for it.
    assert diff["steps"][0] == diff["steps"][1]
    assert diff["worst_steps"][0]["period_ms"] > 800 and diff["worst_5_share"] > 0.7
    assert diff["parts_extra_ms"]["gpu idle"] > 800
    # The table names it with what its timed region met: a step far over the median.
    assert "r1 +" in (tmp_path / "variance.md").read_text()
    assert any("over 3x their median" in f for f in slow["repeats"][1]["timing_flags"])
