"""benchmarks.pdl_processes on the CPU: pdl_ab's outputs of several processes merged, as
`python -m benchmarks.pdl_processes --merge` does on any machine (the processes themselves need a
GPU with PDL)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def pdl_ab_doc(off_ms: float, engine_ms: float, device: str = "NVIDIA H200") -> dict:
    """One pdl_ab process's output: qwen3-4b at one row, modes off (the reference) and engine."""
    row = {"identical_logits": True, "floor_ms": 1.9, "weight_floor_ms": 1.884,
           "off_ms": off_ms, "off_range_ms": [off_ms, off_ms + 0.01], "off_x_floor": off_ms / 1.9,
           "engine_ms": engine_ms, "engine_range_ms": [engine_ms, engine_ms + 0.01],
           "engine_x_floor": engine_ms / 1.9, "engine_speedup": round(off_ms / engine_ms, 4),
           "engine_speedup_range": [1.0, 1.1]}  # fmt: skip
    presets = {"qwen3-4b": {"weight_bytes": 8, "batch_1": row}}
    return {"device": device, "torch": "2.11.0+cu130", "context": 512, "rounds": 15,
            "replays": 20, "presets": presets}  # fmt: skip


def merge(tmp_path: Path, docs: list[dict]) -> subprocess.CompletedProcess:
    files = []
    for i, doc in enumerate(docs):
        files.append(tmp_path / f"p{i}.json")
        files[-1].write_text(json.dumps(doc))
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.pdl_processes", "--merge", *map(str, files),
         "--out", str(tmp_path / "merged.json")],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )  # fmt: skip


def test_processes_merged_give_each_ones_step_and_speedup_and_their_spread(tmp_path):
    done = merge(tmp_path, [pdl_ab_doc(2.64, 2.56), pdl_ab_doc(2.79, 2.62), pdl_ab_doc(2.77, 2.60)])
    assert done.returncode == 0, done.stderr
    merged = json.loads((tmp_path / "merged.json").read_text())
    assert merged["processes"] == 3 and merged["arguments"]["rounds"] == 15
    row = merged["presets"]["qwen3-4b"]["batch_1"]
    assert set(row) == {"identical_logits", "weight_floor_ms", "off", "engine"}
    assert row["off"]["each"] == [2.64, 2.79, 2.77] and row["off"]["median"] == 2.77
    assert row["off"]["spread_pct"] == pytest.approx((2.79 - 2.64) / 2.77 * 100, abs=0.01)
    assert "speedup" not in row["off"]  # the reference mode
    assert row["engine"]["speedup"]["each"] == [1.0312, 1.0649, 1.0654]
    assert "qwen3-4b batch 1 engine: 2.600 ms (spread 2.3% over 3 processes), 1.065x the " \
           "first mode (1.031-1.065)" in done.stderr  # fmt: skip


def test_unlike_processes_are_refused_in_one_line(tmp_path):
    done = merge(tmp_path, [pdl_ab_doc(2.6, 2.5), pdl_ab_doc(2.6, 2.5, device="NVIDIA H100")])
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1].startswith("the processes ran on different GPUs")
    other = pdl_ab_doc(2.6, 2.5)
    other["presets"]["qwen3-4b"]["batch_4"] = other["presets"]["qwen3-4b"]["batch_1"]
    done = merge(tmp_path, [pdl_ab_doc(2.6, 2.5), other])
    assert done.returncode != 0 and "different presets or batches" in done.stderr


def test_a_failed_process_ends_the_run_in_one_line_naming_why(tmp_path):
    """The processes are real pdl_ab runs: here, without a GPU, the first one exits and says why."""
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.pdl_processes", "--processes", "2", "--",
         "--presets", "qwen3-4b", "--batches", "1"],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
    )  # fmt: skip
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1] == (
        "pdl_ab process 1 failed (exit 1): pdl_ab needs a CUDA GPU"
    )
