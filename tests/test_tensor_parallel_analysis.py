"""The analysis of a real tensor-parallel run on the CPU (gloo, two processes, the tiny model): the
per-rank tables, results.json's rank tables, the report's section, and the cost model at TP 2 beside
TP 1. And an nsys pass of a TP run assembled from a hand-laid export of both processes (no nsys
here): every rank becomes a run of the catalog, rank 0's stands for the run."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bubblelab.core.errors import BubblelabError
from bubblelab.costmodel.predict import predict_runs
from bubblelab.costmodel.tensor_parallel import tp_comparison, tp_pieces, tp_steps
from bubblelab.profiling import overview, ranks
from bubblelab.runs import assemble as assemble_module
from bubblelab.runs.record import read_record, write_record
from bubblelab.runs.rundir import load_document, read_results, results_path
from bubblelab.runs.sources import run_catalog
from bubblelab.runs.sweep import SweepSpec, run_sweep
from testing.synthetic_tp_trace import tp_trace
from tests.cli_helpers import run_bubblelab

ROOT = Path(__file__).parents[1]


def sweep(out: Path, tp: int) -> Path:
    spec = SweepSpec(model="tiny-llama", depths=[1, 2], streams=[2], output_len_mean=12,
                     repeats=2, requests_per_stream=2, max_model_len=64,
                     tensor_parallel=tp)  # fmt: skip
    run_sweep(spec, out, use_nsys=False, say=lambda _: None)
    return out


@pytest.fixture(scope="module")
def tp2(tmp_path_factory) -> Path:
    return sweep(tmp_path_factory.mktemp("sweeps") / "tp2", 2)


@pytest.fixture(scope="module")
def tp1(tmp_path_factory) -> Path:
    return sweep(tmp_path_factory.mktemp("sweeps") / "tp1", 1)


def bubblelab(*args: str) -> subprocess.CompletedProcess:
    return run_bubblelab(*args, columns=200, timeout=300)


def test_every_rank_has_the_same_steps_and_its_own_bubble(tp2):
    con = run_catalog(tp2)
    groups = ranks.tp_groups(con)
    assert sorted(groups["run_id"].unique()) == [
        f"s2-d{d}-r{r}-timeline" for d in (1, 2) for r in (0, 1)
    ]
    for run_id in groups["run_id"].unique():
        steps = ranks.rank_steps(con, run_id)
        steps = steps[steps["kind"].notna()]  # rank 0's last tick plans nothing: no step
        by_rank = steps.groupby("rank")["step"].apply(set)
        assert list(by_rank.index) == [0, 1] and by_rank[0] == by_rank[1]
        # a step is the same step on both ranks: same kind and rows, overlapping forwards
        lead, worker = (steps[steps["rank"] == r].set_index("step") for r in (0, 1))
        assert (lead["kind"] == worker["kind"]).all()
        assert (lead["batch_size"] == worker["batch_size"]).all()
        both = lead["forward_start"].notna()
        overlap = worker.loc[both, "forward_end"].clip(
            upper=lead.loc[both, "forward_end"]
        ) - worker.loc[both, "forward_start"].clip(lower=lead.loc[both, "forward_start"])
        assert (overlap > 0).mean() > 0.9
        # no kernels in a timeline: no compute/communication split, said as NULL
        assert steps["comm_ms"].isna().all()
    report = overview.analyze(con, warmup=0)
    assert len(report["tensor_parallel"]) == 4
    for tp in report["tensor_parallel"]:
        assert tp["ranks"] == 2 and tp["steady_steps"] > 3
        assert all(r["bubble_ms"] is not None and r["steps"] == tp["steady_steps"]
                   for r in tp["per_rank"])  # fmt: skip
        shares = [r["gpu_straggler_share"] for r in tp["per_rank"]]
        assert sum(shares) == pytest.approx(1.0)  # each step has exactly one straggler
        worker = tp["per_rank"][1]["attribution_ms_per_step"]["began"]["phase"]
        if tp["run_id"].startswith("s2-d1"):  # blocking: the worker idles waiting for rank 0
            assert "recv" in worker
    assert all(g["runs"] == [f"s2-d{g['depth']}-r{r}-timeline" for r in (0, 1)]
               for g in report["groups"])  # fmt: skip


def test_results_json_carries_the_ranks_and_the_report_shows_them(tp2, tmp_path):
    results = read_results(tp2)
    assert set(results.runs["rank"]) == {0}  # a worker is not a run of its own
    assert set(results.ranks["run_id"]) == set(results.runs["run_id"])
    assert set(results.ranks["rank"]) == {0, 1}
    assert set(results.rank_attribution["rank"]) == {0, 1}
    out = bubblelab("report", str(tp2))
    assert out.returncode == 0, out.stderr
    page = (tp2 / "report.html").read_text()
    assert 'id="ranks"' in page and "Tensor parallel: the ranks" in page
    assert "TP 2 · 2 streams" in page and "pieces: each step&#39;s slowest of 2 ranks" in page
    # the CLI reads the run directory's catalog, and its JSON carries every TP run's ranks
    out = bubblelab("analyze", str(tp2), "--json", "-")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert len(doc["tensor_parallel"]) == 4
    assert {r["name"] for r in doc["runs"]} >= {"tiny-llama·tp2·s2·d1·r0·rank1"}


def test_the_cost_model_takes_each_steps_gpu_time_across_ranks(tp2):
    results = read_results(tp2)
    table = predict_runs(results.runs, results.steps, results.requests, ranks=results.ranks,
                         n_boot=50)  # fmt: skip
    (row,) = table.to_dict("records")
    assert row["tensor_parallel"] == 2 and "slowest of 2 ranks" in row["gpu_from"]
    assert row["pairs"] == 2  # rank 0's runs, paired by repeat
    assert set(row["runs_block"].split(",")) == {"s2-d1-r0-timeline", "s2-d1-r1-timeline"}
    assert set(row["runs_pipe"].split(",")) == {"s2-d2-r0-timeline", "s2-d2-r1-timeline"}
    for key in ("predicted_pct", "wall_predicted_pct", "wall_d1_predicted_pct", "observed_pct"):
        assert row[key] == row[key]  # formed (not NaN)
    assert row["straggler_extra_ms"] >= 0 and row["handoff_host_ms"] > 0
    # step by step: from the last rank to begin to the last to end lies within the ranks' own
    # forward spans (the one that began last, the one that ended last); sampling is the slowest's
    spans = results.ranks.groupby(["run_id", "step"]).agg(
        lo=("forward_ms", "min"), hi=("forward_ms", "max"), sampling=("sampling_ms", "max")
    )
    across = tp_steps(results.steps, results.ranks).set_index(["run_id", "step"])
    across = across.join(spans, how="inner").dropna(subset=["lo"])
    assert len(across) > 50
    assert (across["forward_ms"].between(across["lo"] - 1e-9, across["hi"] + 1e-9)).all()
    assert (across["sampling_ms"] == across["sampling"]).all()
    assert (across["rank0_forward_ms"] <= across["hi"]).all()
    pieces = tp_pieces(results.ranks)
    assert list(pieces["ranks"]) == [2] * 4 and (pieces["straggler_extra_ms"] >= 0).all()
    # without the per-rank tables the model says it used rank 0's own pieces
    alone = predict_runs(results.runs, results.steps, results.requests, n_boot=50).iloc[0]
    assert alone["gpu_from"].startswith("rank 0") and alone["gpu_from"] != row["gpu_from"]
    # (their predicted periods may coincide: when rank 0 is the slowest rank in every step, as a
    # loaded 2-core machine makes it now and then, the slowest rank's GPU time is rank 0's)


def test_predict_puts_tp_1_beside_tp_2(tp1, tp2):
    out = bubblelab("predict", str(tp1), str(tp2), "--n-boot", "50", "--json", "-")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert sorted(r["tensor_parallel"] for r in rows) == [1, 2]
    import pandas as pd

    comparison = tp_comparison(pd.DataFrame(rows))
    assert list(comparison["tensor_parallel"]) == [1, 2] and set(comparison["streams"]) == {2}
    out = bubblelab("predict", str(tp1), str(tp2), "--n-boot", "50")
    assert out.returncode == 0, out.stderr
    assert "at each tensor-parallel size" in out.stdout
    assert "GPU pieces: each step's slowest of 2 ranks" in out.stdout


def test_an_nsys_pass_of_a_tp_run_assembles_every_rank(tp2, tmp_path, monkeypatch):
    """What run-and-profile's nsys pass leaves, with a hand-laid export of both processes standing
    in for nsys's report: assemble ingests every process, ranks them and keeps rank 0's run."""
    out = tmp_path / "sweep"
    shutil.copytree(tp2, out)
    plan = json.loads((out / "runs" / "plain" / "plan.json").read_text())
    record = read_record(out / "runs" / "plain", "s2-d1-r0")
    decodes = sum(s["kind"] == "decode" for s in record["timeline"]["steps"])
    nsys = out / "runs" / "nsys"
    nsys.mkdir()
    run = next(r for r in plan["runs"] if r["tag"] == "s2-d1-r0")
    plan.update(runs=[run], out_dir=str(nsys), profile=True)
    (nsys / "plan.json").write_text(json.dumps(plan))
    write_record(nsys, "s2-d1-r0", record)
    (out / "traces").mkdir()
    tp_trace(out / "traces" / "run.0.sqlite", steps=decodes + 1)  # a prefill, then the decodes
    monkeypatch.setattr(assemble_module, "nsys_version", lambda: "2025.3.2")
    assemble_module.assemble(out)
    results = read_results(out)
    profiled = results.runs[results.runs["profiled"].eq(True)]
    (run_id,) = profiled["run_id"]
    assert (profiled["tensor_parallel"].iloc[0], profiled["rank"].iloc[0]) == (2, 0)
    mine = results.ranks[results.ranks["run_id"] == run_id]
    assert set(mine["rank"]) == {0, 1}
    steady = mine.dropna(subset=["comm_ms"]).groupby("rank")["comm_ms"].median()
    assert steady.round(6).to_dict() == {0: 0.16, 1: 0.08}  # NCCL time, from the kernels
    assert set(results.runs["rank"]) == {0}


def test_a_damaged_ranks_table_is_one_line(tp2, tmp_path):
    doc = load_document(results_path(tp2))
    for row in doc["ranks"]:
        row.pop("forward_start")
    (tmp_path / "results.json").write_text(json.dumps(doc))
    with pytest.raises(BubblelabError, match=r"ranks lack the column\(s\) forward_start"):
        read_results(tmp_path)
    for row in doc["ranks"]:
        row["forward_start"] = 0
    doc["ranks"][0]["forward_start"] = "soon"
    (tmp_path / "results.json").write_text(json.dumps(doc))
    with pytest.raises(BubblelabError, match=r"ranks.forward_start holds values that are not"):
        read_results(tmp_path)


def test_the_held_out_table_forecasts_a_tp_sweep_across_ranks(tp2, tmp_path):
    """benchmarks.heldout_2_table on a TP-2 sweep (the TP held-out set's path, issue #27 item 4)
    costs it with every rank's pieces, as `predict` does, not rank 0's alone."""
    shutil.copytree(tp2, tmp_path / "runs" / "tp-sweep")
    held_out = tmp_path / "set.json"
    held_out.write_text(json.dumps({"sweeps": [{"name": "tp-sweep", "ids": {"2": "T0"}}]}))
    rows = tmp_path / "rows.json"
    cmd = [sys.executable, "-m", "benchmarks.heldout_2_table", "--set", str(held_out),
           "--run", f"cpu={tmp_path / 'runs'}", "--json", str(rows), "--n-boot", "50"]  # fmt: skip
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, timeout=300)
    (row,) = json.loads(rows.read_text())["rows"]
    assert row["id"] == "T0" and "slowest of 2 ranks" in row["gpu_from"]
