"""benchmarks.env_ab on the CPU: variants' environments reach their processes, the rounds alternate,
and the summary groups every run by variant, preset, streams and depth against the first variant."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


def env_ab(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "benchmarks.env_ab", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def engine_report(preset: str, tps: list[float]) -> dict:
    runs = [
        {"streams": 1, "depth": 2, "repeat": i, "tokens_per_s": t, "forward_ms": 1000 / t}
        for i, t in enumerate(tps)
    ]
    return {"preset": preset, "runs": runs}


def test_summarise_pools_every_process_and_compares_with_the_first_variant(tmp_path: Path):
    plan = {"variants": {"base": {}, "early": {"X": "1"}}, "sweep_args": [], "rounds": 2}
    (tmp_path / "variants.json").write_text(json.dumps(plan))
    runs = {"base-0": [100.0, 102.0], "base-1": [101.0, 99.0], "early-0": [110.0, 111.0]}
    for tag, tps in runs.items():  # early-1 never ran (a deadline)
        (tmp_path / tag).mkdir()
        (tmp_path / tag / "engine-m.json").write_text(json.dumps(engine_report("m", tps)))
    done = env_ab("--summarise", str(tmp_path))
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["processes"] == {"base": 2, "early": 1}
    base, early = summary["rows"]
    assert (base["variant"], base["runs"], base["tokens_per_s"]) == ("base", 4, 100.5)
    assert base["tokens_per_s_range"] == [99.0, 102.0] and base["vs_first"] == 1.0
    assert (early["runs"], early["tokens_per_s"]) == (2, 110.5)
    assert early["vs_first"] == round(110.5 / 100.5, 4)
    assert "early: 110.5 tok/s [110.0-111.0] over 2 runs" in done.stderr


def test_each_variant_runs_the_engine_in_its_own_environment(tmp_path: Path):
    out = tmp_path / "ab"
    sweep = ["--device", "cpu", "--presets", "tiny-qwen3", "--streams", "1", "--repeats", "1"]
    done = env_ab(
        "--variant",
        "base",
        "--variant",
        "nopdl",
        "BUBBLELAB_PDL=off",
        "--variant",
        "broken",
        "PYTHONHOME=/nonexistent",
        "--rounds",
        "1",
        "--out",
        str(out),
        "--",
        *sweep,
        "--L",
        "4",
    )
    # the third variant's interpreter cannot start in its environment: the run stops there, says
    # so, and still summarises the two that ran
    assert done.returncode != 0 and "broken-0 failed" in done.stderr
    assert "Fatal Python error" in done.stderr
    plan = json.loads((out / "variants.json").read_text())
    assert plan["variants"]["nopdl"] == {"BUBBLELAB_PDL": "off"}
    order = [line.split(":")[0] for line in done.stderr.splitlines() if ": exit" in line]
    assert order == ["base-0", "nopdl-0", "broken-0"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["processes"] == {"base": 1, "nopdl": 1, "broken": 0}
    assert {(r["variant"], r["depth"]) for r in summary["rows"]} == {
        (v, d) for v in ("base", "nopdl") for d in (1, 2)
    }


@pytest.mark.parametrize(
    "variant,message",
    [(["a=1"], "starts with its name"), (["a", "B"], "expected NAME=VALUE")],
)
def test_a_malformed_variant_is_refused_before_anything_runs(tmp_path: Path, variant, message):
    done = env_ab("--variant", "base", "--variant", *variant, "--out", str(tmp_path / "x"))
    assert done.returncode != 0 and message in done.stderr
    assert not (tmp_path / "x").exists()


def test_round_order_alternates():
    code = "from benchmarks.env_ab import round_order as r; print(r([1, 2, 3], 0), r([1, 2, 3], 1))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip() == "[1, 2, 3] [3, 2, 1]"
