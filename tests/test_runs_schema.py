"""Run directories written by an earlier version (schema 1 or 2) read as the current schema."""

import gzip
import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from bubblelab.costmodel.costs import launched
from bubblelab.costmodel.schedule import Limits, replay, requests_from_table
from bubblelab.runs.rundir import SCHEMA_VERSION, read_results
from bubblelab.runs.schema import with_arrivals
from bubblelab.runs.workload import WorkloadSpec, make_requests

ROOT = Path(__file__).parents[1]
SWEEP = ROOT / "docs" / "measurements" / "h200-sweep"
needs_sweep = pytest.mark.skipif(not SWEEP.is_dir(), reason="H200 sweep not in this checkout")


@needs_sweep
def test_a_schema_1_sweep_gets_repeats_and_its_requests_back():
    results = read_results(SWEEP / "qwen3-4b")
    runs = results.runs
    assert SCHEMA_VERSION == 3 and not runs["profiled"].any()
    assert sorted(runs["repeat"].unique()) == [0, 1, 2]
    assert (runs["prompt_len"] == 32).all() and (runs["max_num_seqs"] == 64).all()
    # Unconstrained: each request produced its cap, regenerated from the sweep's seed.
    tokens = results.requests.groupby("run_id")["output_len"].sum()
    assert tokens.to_dict() == runs.set_index("run_id")["generated_tokens"].to_dict()


@needs_sweep
def test_a_constrained_schema_1_run_gets_the_lengths_its_depth_1_steps_imply():
    results = read_results(SWEEP / "qwen3-0.6b-detect")
    depth1 = results.runs[results.runs["depth"] == 1]
    assert set(results.requests["run_id"]) == set(depth1["run_id"])  # depth 2's zombies hide them
    for run in depth1.itertuples():
        mine = requests_from_table(results.requests[results.requests["run_id"] == run.run_id])
        schedule = replay(mine, run.streams, 1, Limits(32, 8192, 512))
        steps = launched(results.steps[results.steps["run_id"] == run.run_id])
        assert list(schedule["batch_size"]) == steps["batch_size"].astype(int).tolist()


def test_a_schema_1_document_without_a_sweep_still_reads(tmp_path):
    doc = {
        "schema_version": 1,
        "runs": [dict(run_id="s4-d1-r3-timeline", depth=1, streams=4, device="cpu",
                      mean_generated_len=3.0, wall_s=0.1, generated_tokens=12, source="timeline")],
        "steps": [dict(run_id="s4-d1-r3-timeline", step=0, kind="decode", depth=1, batch_size=4,
                       forward_ms=1.0, sampling_ms=0.1, busy_ms=1.1, bubble_ms=0.0, period_ms=None,
                       plan_ms=0.0, launch_ms=0.1, commit_ms=0.1, finalize_ms=0.0, wait_ms=0.0,
                       gpu_start_ns=0, gpu_end_ns=1)],
        "provenance": {},
    }  # fmt: skip
    (tmp_path / "results.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode()))
    results = read_results(tmp_path)
    assert results.runs["repeat"].tolist() == [3] and results.requests.empty


@needs_sweep
def test_predict_reads_a_schema_1_run_directory():
    result = subprocess.run(
        [sys.executable, "-m", "bubblelab", "predict", str(SWEEP / "qwen3-1.7b"), "--n-boot", "50"],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "qwen3-1.7b · NVIDIA H200 · 64 streams" in result.stdout
    assert "?" in result.stdout and "not known to ±1 point" in result.stdout


DEV = ROOT / "docs" / "measurements" / "2026-11-23" / "costmodel-dev"


@pytest.mark.skipif(not DEV.is_dir(), reason="the 2026-11-23 sweeps are not in this checkout")
def test_predict_reads_a_results_file_of_todays_sweep():
    """A committed results file by itself (NAME.results.json.gz, schema 2), read by `predict`."""
    result = subprocess.run(
        [sys.executable, "-m", "bubblelab", "predict", str(DEV / "dev-qwen3-4b.results.json.gz"),
         "--n-boot", "50"],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    for streams in ("1 stream", "8 streams", "32 streams"):  # a table row or a record
        assert re.search(rf"qwen3-4b · NVIDIA H200 · {streams}\b", result.stdout), streams


@pytest.mark.skipif(not DEV.is_dir(), reason="the 2026-11-23 sweeps are not in this checkout")
def test_a_schema_2_measured_file_keeps_where_its_gaps_began():
    """Schema 2 kept one split of the bubble: a measured run's was where each gap began."""
    path = DEV / "dev-qwen3-0.6b.results.json.gz"
    kept = pd.DataFrame(json.loads(gzip.decompress(path.read_bytes()))["attribution"])
    attribution = read_results(path).attribution
    assert attribution["began_ms"].tolist() == kept["bubble_ms"].tolist()
    assert attribution["began_share"].tolist() == kept["bubble_share"].tolist()
    assert attribution["time_ms"].isna().all() and "bubble_ms" not in attribution


def test_a_schema_2_demo_file_keeps_where_its_bubble_went(tmp_path):
    """The demo's simulated runs kept the time split (and no shares) in schema 2."""
    doc = {
        "schema_version": 2,
        "runs": [dict(run_id="sim", depth=1, streams=1, device="simulated",
                      mean_generated_len=3.0, wall_s=0.1, generated_tokens=3)],
        "steps": [dict(run_id="sim", step=0, kind="decode", depth=1, batch_size=1,
                       forward_ms=1.0, sampling_ms=0.1, busy_ms=1.1, bubble_ms=0.5, period_ms=1.6,
                       plan_ms=0.1, launch_ms=0.1, commit_ms=0.1, finalize_ms=0.1, wait_ms=0.0,
                       gpu_start_ns=0, gpu_end_ns=1)],
        "attribution": [{"run_id": "sim", "phase": "launch", "bubble_ms": 0.3},
                        {"run_id": "sim", "phase": "other", "bubble_ms": 0.2}],
        "provenance": {"simulated": True},
    }  # fmt: skip
    (tmp_path / "results.json").write_text(json.dumps(doc))
    attribution = read_results(tmp_path).attribution
    assert attribution["time_ms"].tolist() == [0.3, 0.2]
    assert attribution["began_ms"].isna().all()


def test_an_arrival_sweep_without_arrival_times_gets_them_from_its_seed():
    """Requests tables before arrival_s (the first H100 held-out arrivals sweep): each run's
    arrivals regenerated from its repeat's seed, as make_requests drew them."""
    sweep = {"arrival_rate": 200.0, "output_len_mean": 20, "seed": 3}
    runs = pd.DataFrame({"run_id": ["a", "b"], "repeat": [0, 1], "streams": [2, 2],
                         "output_len_mean": [20.0, 20.0]})  # fmt: skip
    requests = pd.DataFrame({"run_id": ["a"] * 4 + ["b"] * 4, "request": [*range(4)] * 2,
                             "prompt_len": 8})  # fmt: skip
    filled = with_arrivals(requests, runs, sweep)
    for run_id, repeat in (("a", 0), ("b", 1)):
        spec = WorkloadSpec(streams=2, requests=4, output_len_mean=20, prompt_len=8,
                            arrival_rate=200.0, seed=3 + repeat)  # fmt: skip
        sent = [r.arrival_s for r in make_requests(spec, vocab_size=512)]
        assert filled.loc[filled["run_id"] == run_id, "arrival_s"].tolist() == sent
    assert with_arrivals(requests, runs, {}) is requests  # a closed loop has none to add
