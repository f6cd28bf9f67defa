"""The hand-over probe (engine.handoff_probe): a depth-1 run measures the idle between two queued
steps that only depth 2 shows, and the forecast from depth 1 alone reads it."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from bubblelab.core.timeline import Timeline
from bubblelab.costmodel.configs import pair_runs
from bubblelab.costmodel.costs import handoff_ms, launched
from bubblelab.costmodel.predict import predict_runs
from bubblelab.costmodel.wholerun import predict_pair_wall
from bubblelab.engine.handoff_probe import REPEATS, probe_handoff
from bubblelab.engine.sampler import SamplingFlags
from bubblelab.engine.sampling_params import SamplingParams
from bubblelab.profiling.analysis import per_step_from_timeline
from bubblelab.runs.driver import run_workload
from bubblelab.runs.rundir import read_results
from bubblelab.runs.workload import WorkloadSpec
from tests.engine_helpers import Req, make_engine, run_script

GREEDY = SamplingFlags(True, False, False)
SPEC = WorkloadSpec(streams=3, requests=6, output_len_mean=8, prompt_len=4, seed=5)


def script() -> list[Req]:
    return [
        Req(
            f"r{i}", [5 + i, 9, 17, 33 + i], SamplingParams(max_tokens=6 + i, temperature=t, seed=i)
        )
        for i, t in enumerate([0.0, 0.0, 0.8, 1.1])
    ]


@pytest.mark.parametrize("flags", [GREEDY, SamplingFlags(False, True, True, 5)])
def test_the_probe_queues_each_hand_over_and_times_it(tiny_llama, flags):
    engine = make_engine(tiny_llama)
    probe = probe_handoff(engine.runner, rows=3, flags=flags, repeats=9)
    # every sample was queued behind the hold (none ran ahead of the host), each idle a real,
    # small interval: a CPU device thread picks the next closure up within a millisecond
    assert probe.dropped == 0 and len(probe.gaps_ms) == 9
    assert all(0.0 <= g < 5.0 for g in probe.gaps_ms)
    s = probe.summary()
    assert s["handoff_probe_n"] == 9 and s["handoff_probe_ms"] == probe.median_ms
    assert 0.0 <= s["handoff_probe_iqr_ms"] < 5.0


def test_the_probe_touches_no_request(tiny_llama):
    """Both slots are padded first: the probe's forwards write the scratch page and sample into the
    pad row, so an engine probed between two batches gives the same tokens as one never probed."""
    plain = run_script(make_engine(tiny_llama, depth=2), script())
    engine = make_engine(tiny_llama, depth=2)
    run_script(engine, [Req("w", [7, 8, 9], SamplingParams(max_tokens=4, temperature=0.0))])
    probe_handoff(engine.runner, rows=4, flags=GREEDY, repeats=5)
    probed = run_script(engine, script())
    assert probed.tokens == plain.tokens


@pytest.mark.parametrize("depth", [1, 2])
def test_at_tp_2_the_workers_replay_the_probe_and_nothing_else_changes(tiny_llama, depth):
    """Under tensor parallelism rank 0 times the hand-over while each worker replays the probe's
    forwards and samplings in the order it accepts (a slot launched, then sampled): the run records
    the probe, every rank ends idle, and the tokens are those of an engine never probed, which are
    TP 1's (greedy, fp32)."""
    from tests.engine_helpers import make_tp_engine

    reqs = [Req(r.rid, r.prompt, SamplingParams(max_tokens=r.params.max_tokens, ignore_eos=True))
            for r in script()]  # fmt: skip
    plain = run_script(make_engine(tiny_llama, depth=depth), reqs)
    engine = make_tp_engine("tiny-llama", 1, depth=depth)
    try:
        run_script(engine, [Req("w", [7, 8, 9], SamplingParams(max_tokens=4, temperature=0.0))])
        probe = probe_handoff(engine.runner, rows=4, flags=GREEDY, repeats=5)
        assert probe.dropped == 0 and len(probe.gaps_ms) == 5
        probed = run_script(engine, reqs)  # ends with check_idle: on every rank
        s = run_workload(engine, SPEC).summary
        engine.check_idle()
    finally:
        engine.close()
    assert probed.tokens == plain.tokens
    assert s["tensor_parallel"] == 2 and s["handoff_probe_n"] > 0
    # A sample whose queuing outlasted the hold is dropped and the hold doubled, by design (one of
    # the run's was, on a loaded 2-core CPU): the probe still timed every sample it asked for
    assert s["handoff_probe_n"] == REPEATS and s["handoff_probe_dropped"] < REPEATS
    assert math.isfinite(s["handoff_probe_ms"])


@pytest.mark.parametrize("depth", [1, 2])
def test_every_run_records_its_probe(tiny_llama, depth):
    s = run_workload(make_engine(tiny_llama, depth=depth), SPEC).summary
    assert s["handoff_probe_n"] > 0 and math.isfinite(s["handoff_probe_ms"])
    assert s["new_shapes_in_run"] == 0  # the probe runs before the timed region, not inside it
    bare = run_workload(make_engine(tiny_llama, depth=depth), SPEC, warmup=False).summary
    assert "handoff_probe_ms" not in bare  # no warm-up, no probe: the run is as asked


SWEEP = Path(__file__).parents[1] / "docs" / "measurements" / "h200-sweep" / "qwen3-0.6b"


def test_the_forecast_from_depth_1_costs_its_own_probe_in():
    """On a recorded H200 sweep (taken before the probe existed: its forecast is depth 1's alone),
    give each depth-1 run a probe equal to what its depth-2 runs measured: the forecast then costs
    the hand-over in exactly as a carried one would, and depth 2's `handoff` term has nothing left
    to explain but the runs' spread."""
    sweep = read_results(SWEEP)
    before = predict_runs(sweep.runs, sweep.steps, sweep.requests, n_boot=20)
    assert before["handoff_probe_ms"].isna().all() and (before["handoff_d2_ms"] > 0).all()
    runs = sweep.runs.copy()
    for _, row in before.iterrows():
        mine = runs["run_id"].isin(row["runs_block"].split(","))
        runs.loc[mine, "handoff_probe_ms"] = row["handoff_d2_ms"]
    after = predict_runs(runs, sweep.steps, sweep.requests, n_boot=20)
    assert after["handoff_probe_ms"].tolist() == before["handoff_d2_ms"].tolist()
    assert (after["wall_d1_predicted_pct"] < before["wall_d1_predicted_pct"]).all()
    # -0.52 to -0.08 points before; after, what is left is each run's own hand-over against the
    # median over the configuration's runs, the probe given here: ~0.01 points
    gone, left = before["term_handoff_pts"].abs(), after["term_handoff_pts"].abs()
    assert left.max() < 0.02 and (gone > 4 * left).all()
    d1, d2 = pair_runs(runs)[0]
    r1, r2 = d1.iloc[0], d2.iloc[0]
    args = (sweep.steps[sweep.steps["run_id"] == r1["run_id"]], r1["wall_s"],
            sweep.steps[sweep.steps["run_id"] == r2["run_id"]], r2["wall_s"])  # fmt: skip
    kw = dict(requests=None, streams=int(r1["streams"]), limits=None)
    probed = predict_pair_wall(*args, probe_handoff_ms=0.05, **kw)
    carried = predict_pair_wall(*args, carried_handoff_ms=0.05, **kw)
    assert probed.from_d1_ms == pytest.approx(carried.from_d1_carried_ms)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_the_gpu_the_probe_reads_what_depth_2_measures():
    """One depth-2 run of a GPU-bound configuration (qwen3-0.6b's shapes, seeded weights, 32
    streams): the probe before its timed region and the hand-over its own queued steps show
    (costs.handoff_ms: the median bubble of steady steps the host still waited on) agree within
    4 us, ~11 us each unprofiled on the H200."""
    from bubblelab.engine.config import EngineConfig
    from bubblelab.engine.llm_engine import LLMEngine
    from bubblelab.engine.loader import load_model

    loaded = load_model("qwen3-0.6b", dtype="bf16", device="cuda", seed=0)
    config = EngineConfig(model="qwen3-0.6b", device="cuda", dtype="bf16", depth=2,
                          max_num_seqs=32, max_model_len=512)  # fmt: skip
    engine = LLMEngine(config, loaded, timeline=Timeline())
    spec = WorkloadSpec(streams=32, requests=64, output_len_mean=96, prompt_len=64, seed=4)
    result = run_workload(engine, spec)
    steps = per_step_from_timeline(result.timeline, "gpu", 2)
    measured = handoff_ms(launched(steps))
    probed = result.summary["handoff_probe_ms"]
    assert result.summary["handoff_probe_dropped"] == 0
    assert measured > 0 and abs(probed - measured) < 0.004, (probed, measured)
    engine.close()


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
def test_at_tp_2_on_two_gpus_the_probe_reads_what_depth_2_measures():
    """The same at TP 2 (qwen3-0.6b's shapes split in two, 32 streams, depth 2): rank 0's probe
    against the hand-over rank 0's queued steps show, within 4 us (16.6-16.8 us at depth 2 on two
    H200s in the third TP held-out set)."""
    from bubblelab.engine.config import EngineConfig
    from bubblelab.engine.llm_engine import LLMEngine

    config = EngineConfig(model="qwen3-0.6b", device="cuda", dtype="bf16", depth=2,
                          max_num_seqs=32, max_model_len=512, tensor_parallel=2)  # fmt: skip
    engine = LLMEngine(config, timeline=Timeline())
    try:
        spec = WorkloadSpec(streams=32, requests=64, output_len_mean=96, prompt_len=64, seed=4)
        result = run_workload(engine, spec)
    finally:
        engine.close()
    measured = handoff_ms(launched(per_step_from_timeline(result.timeline, "gpu", 2)))
    probed = result.summary["handoff_probe_ms"]
    assert result.summary["handoff_probe_dropped"] == 0
    assert measured > 0 and abs(probed - measured) < 0.004, (probed, measured)


def test_a_sweep_records_the_probe_and_predict_says_what_it_costed_in(tmp_path):
    """A CPU sweep's runs carry the probe into results.json; `predict` and the report name the
    hand-over its forecasts costed in and, where depth 2's own queued steps idled more than 4 us
    longer or shorter, say so for that configuration."""
    from bubblelab.runs.sweep import SweepSpec, run_sweep
    from tests.cli_helpers import run_bubblelab

    spec = SweepSpec(model="tiny-llama", streams=[3], output_len_mean=12, requests_per_stream=3,
                     prompt_len=6, repeats=2, min_repeats=2)  # fmt: skip
    run_sweep(spec, tmp_path / "sweep", use_nsys=False, say=lambda _: None)
    runs = read_results(tmp_path / "sweep").runs
    assert (runs["handoff_probe_n"] > 0).all() and (runs["handoff_probe_dropped"] == 0).all()
    done = run_bubblelab("predict", str(tmp_path / "sweep"), "--n-boot", "50", columns=200)
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stdout.split())
    assert "hand-over between queued steps, probed by depth 1 and costed into its forecast" in said
    table = predict_runs(runs, read_results(tmp_path / "sweep").steps, n_boot=20)
    row = table.iloc[0]
    assert row["handoff_probe_ms"] == pytest.approx(
        runs[runs["depth"] == 1]["handoff_probe_ms"].median()
    )
    if abs(row["handoff_probe_ms"] - row["handoff_d2_ms"]) > 0.004 and row["handoff_d2_ms"] > 0:
        assert f"{row['label']}: depth 1 probed a hand-over of" in said
    page = tmp_path / "report.html"
    done = run_bubblelab("report", str(tmp_path / "sweep"), "--out", str(page), "--n-boot", "50")
    assert done.returncode == 0, done.stderr
    assert "hand-over between queued steps, probed by depth 1" in page.read_text()
