"""benchmarks.foreign_predict's paired check (issue #24 item 5), run on a kept run as users run it:
each pair's own depth-1 mean step given to the whole-run figure, against that pair's speedup."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

CHECKOUT = Path(__file__).resolve().parents[1]


def trace_steps() -> pd.DataFrame:
    """The depth-1 trace read foreign: 40 steps of 1.0 ms of GPU work, then 0.3 ms of host work."""
    n = 40
    return pd.DataFrame({
        "run_id": "t", "step": range(n), "kind": ["decode"] * n, "batch_size": np.nan,
        "busy_ms": 1.0, "forward_ms": 1.0, "sampling_ms": np.nan, "kernel_gap_ms": 0.0,
        "bubble_ms": 0.3, "wait_ms": 1.0, "period_ms": [1.3] * (n - 1) + [np.nan],
    })  # fmt: skip


def run_steps(run_id: str, depth: int, repeat: int, step_ms: float, wall_s: float) -> pd.DataFrame:
    return pd.DataFrame({
        "run_id": run_id, "step": range(10), "kind": "decode", "depth": depth,
        "period_ms": step_ms, "source": "timeline", "repeat": repeat, "process": 1,
        "wall_s": wall_s, "generated_tokens": 100,
    })  # fmt: skip


def test_each_pair_is_predicted_from_its_own_depth1_step(tmp_path: Path) -> None:
    # Pair by pair: the depth-1 run's mean step, and the pair's measured speedup. The trace's
    # GPU work is 1.0 ms a step, so the figure given a mean step m is m / 1.0 - 1 (no extra
    # steps): +50%, +20%, +40%. Pair 2's host ran faster than in the traced run (1.2 < 1.3), pair
    # 1's and 3's slower: both sides of the traced period.
    pairs = [(1.5, 50.0), (1.2, 19.0), (1.4, 40.0)]  # (depth-1 mean step, measured %)
    tables = []
    for repeat, (step, measured) in enumerate(pairs):
        tables.append(run_steps(f"d1-{repeat}", 1, repeat, step, 1.0 + measured / 100))
        tables.append(run_steps(f"d2-{repeat}", 2, repeat, 1.0, 1.0))
    nsys = run_steps("d1-nsys", 1, 0, 1.3, 9.0).assign(source="nsys")  # left out: profiled
    keep = tmp_path / "keep"
    keep.mkdir()
    pd.concat([*tables, nsys]).to_parquet(keep / "sweep-s4-steps.parquet")
    trace_steps().to_parquet(keep / "sweep-s4-d1-foreign-steps.parquet")
    row = {
        "sweep": "sweep", "model": "m", "device": "GPU", "streams": 4, "output_len": 64.0,
        "observed_pct": 40.0, "observed_interval_pct": [19.0, 50.0], "observed_known": False,
        "pairs": 3, "timeline_d1_pct": 40.0, "step_rule": "sync", "sure": True,
        "extra_steps": 0.0,
    }  # fmt: skip
    (tmp_path / "rows.json").write_text(json.dumps([row]))
    cmd = [sys.executable, "-m", "benchmarks.foreign_predict", "--from-keep", str(keep),
           "--rows", str(tmp_path / "rows.json"), "--out", str(tmp_path / "out")]  # fmt: skip
    done = subprocess.run(cmd, cwd=CHECKOUT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (got,) = json.loads((tmp_path / "out" / "foreign-predict.json").read_text())
    assert got["paired_pairs"] == 3
    assert got["paired_pct"] == pytest.approx(40.0, abs=1e-3)  # the median pair's figure
    assert got["paired_miss_pts"] == pytest.approx(0.0, abs=1e-3)  # misses 0, +1, 0
    assert got["paired_miss_interval_pts"] == pytest.approx([0.0, 1.0], abs=1e-3)
    assert got["paired_within_goal"] and not got["paired_known_within_goal"]  # 3 pairs: no 95%
    table = (tmp_path / "out" / "foreign-predict.md").read_text()
    assert "+0.0 [+0.0, +1.0]* (3)" in table


def test_the_options_are_one_way_or_the_other(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "benchmarks.foreign_predict", "--out", str(tmp_path)]
    done = subprocess.run(cmd, cwd=CHECKOUT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "--sweeps, or --from-keep with --rows" in done.stderr
