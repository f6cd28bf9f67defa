"""run-and-profile's sweep: one engine per pass, paired repeats, nsys ranges, what nsys changed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest

from bubblelab.core.errors import BubblelabError
from bubblelab.costmodel.perturbation import profiler_perturbation
from bubblelab.costmodel.simulate import LoopCosts, simulate_run
from bubblelab.engine.cuda_graphs import prefill_buckets
from bubblelab.profiling import nsys
from bubblelab.profiling.catalog import connect
from bubblelab.runs.assemble import _ingest_trace, assemble
from bubblelab.runs.driver import run_workload
from bubblelab.runs.record import read_record
from bubblelab.runs.rundir import read_results
from bubblelab.runs.state import SPEC_FILE, read_state
from bubblelab.runs.sweep import MIN_DECODE_STEPS, SweepSpec, prefill_budget, run_sweep
from bubblelab.runs.workload import WorkloadSpec
from tests.engine_helpers import make_engine
from tests.profiling_trace_builder import blocking_trace


def test_one_engine_serves_both_depths(tiny_llama):
    """set_depth changes the pipeline's bound and nothing else: the same outputs as two engines."""
    spec = WorkloadSpec(streams=3, requests=6, output_len_mean=8, prompt_len=5, seed=4)
    shared = make_engine(tiny_llama, depth=1)
    outputs = {}
    for depth in (1, 2, 1):
        shared.set_depth(depth)
        got = run_workload(shared, spec, warmup=False).outputs
        fresh = run_workload(make_engine(tiny_llama, depth=depth), spec, warmup=False).outputs
        assert got == fresh
        outputs[depth] = got
    assert outputs[1] == outputs[2]
    with pytest.raises(BubblelabError, match="depth must be 1"):
        shared.set_depth(3)


def test_runs_are_long_enough_by_default_and_pair_up_by_repeat():
    spec = SweepSpec(streams=[1, 8], output_len_mean=30, repeats=2)
    assert spec.per_stream() * 30 >= MIN_DECODE_STEPS  # 14 requests a stream at L = 30
    assert SweepSpec(output_len_mean=110).per_stream() == 4
    runs = spec.runs()
    # A configuration's repeats together, depths in ABBA order: a drift falls on both alike.
    assert [r["tag"] for r in runs[:4]] == ["s1-d1-r0", "s1-d2-r0", "s1-d2-r1", "s1-d1-r1"]
    # Depth 1 and depth 2 of a repeat run on the same requests; repeats differ.
    seeds = {(r["repeat"], r["depth"]): r["workload"]["seed"] for r in runs}
    assert seeds[0, 1] == seeds[0, 2] != seeds[1, 1]


def test_a_cpu_sweep_writes_schema_2_with_requests(tmp_path):
    spec = SweepSpec(model="tiny-llama", streams=[1, 3], output_len_mean=6, requests_per_stream=2,
                     prompt_len=8, repeats=2)  # fmt: skip
    seen = []
    run_sweep(spec, tmp_path, use_nsys=False, on_run=lambda tag, summary: seen.append(tag))
    assert seen == [r["tag"] for r in spec.runs()]
    results = read_results(tmp_path)
    runs = results.runs.set_index("run_id")
    assert sorted(runs["repeat"].unique()) == [0, 1] and not runs["profiled"].any()
    tokens = results.requests.groupby("run_id")["output_len"].sum()
    assert tokens.to_dict() == runs["generated_tokens"].to_dict()
    timings = results.provenance["timings"]["plain"]
    assert set(timings["runs_s"]) == set(seen) and timings["setup_s"] > 0  # one engine for all


FAKE_NSYS = f"""#!{sys.executable}
import pathlib, sys
args = sys.argv[1:]
if args[0] == "export":
    pathlib.Path(args[args.index("--output") + 1]).write_text("exported later")
else:
    assert "--capture-range-end=repeat" in args
    out = pathlib.Path(args[args.index("-o") + 1])
    for n in (2, 10, 1):  # one report per capture range; nsys exported all but the last
        out.with_name(f"{{out.name}}.{{n}}.nsys-rep").write_text("report")
        if n != 10:
            out.with_name(f"{{out.name}}.{{n}}.sqlite").write_text("export")
"""


def test_profile_ranges_returns_one_export_per_range_in_order(tmp_path, monkeypatch):
    fake = tmp_path / "nsys"
    fake.write_text(FAKE_NSYS)
    fake.chmod(0o755)
    monkeypatch.setenv("NSYS", str(fake))
    exports = nsys.profile_ranges(tmp_path / "traces" / "run", ["python", "-m", "x"])
    assert [p.name for p in exports] == ["run.1.sqlite", "run.2.sqlite", "run.10.sqlite"]
    assert exports[2].read_text() == "exported later"


def test_a_report_is_checked_against_the_run_it_is_matched_to(tmp_path):
    trace = blocking_trace(tmp_path / "t.sqlite")  # depth 1: a prefill and five decode steps
    steps = [{"kind": "prefill"}] + [{"kind": "decode"}] * 5
    record = {"summary": {"depth": 1}, "timeline": {"steps": steps}}
    assert _ingest_trace(trace, record, {"depth": 1}, connect(None))
    record["timeline"]["steps"] = steps[:-1]
    with pytest.raises(BubblelabError, match="reports out of order"):
        _ingest_trace(trace, record, {"depth": 1}, connect(None))


def test_the_profilers_perturbation_per_phase():
    """Runs measured both ways: nsys (here a host 1.5x slower, the way node-level graph tracing
    slows the graph launch) inflates the host tick and the depth-1 period, barely the GPU work, and
    the profiled
    speedup overstates the unprofiled one."""
    frames = []
    for profiled, host_speed in ((False, 1.0), (True, 1.5)):
        costs = LoopCosts(fwd_base=1.0, launch=0.3, host_speed=host_speed, jitter=0.0)
        for depth in (1, 2):
            r = simulate_run(depth, streams=4, requests=16, output_len=40, costs=costs,
                             run_id=f"{profiled}-{depth}")  # fmt: skip
            frames.append(({**r["run"], "profiled": profiled}, r["steps"]))
    runs = pd.DataFrame([run for run, _ in frames])
    table = profiler_perturbation(runs, pd.concat([s for _, s in frames])).set_index("depth")
    assert table.loc[1, "host_tick_inflation"] == pytest.approx(0.5, abs=0.02)
    assert abs(table.loc[1, "gpu_inflation"]) < 0.01
    assert table.loc[1, "period_inflation"] > 0.1
    assert table.loc[1, "speedup_nsys_pct"] > table.loc[1, "speedup_plain_pct"] + 5
    assert profiler_perturbation(runs[~runs.profiled], pd.concat([s for _, s in frames])).empty


def test_results_record_what_each_request_produced(tmp_path):
    spec = SweepSpec(model="tiny-llama", streams=[2], output_len_mean=5, requests_per_stream=2,
                     prompt_len=6, repeats=1, depths=[1])  # fmt: skip
    run_sweep(spec, tmp_path, use_nsys=False)
    record = read_record(tmp_path / "runs" / "plain", "s2-d1-r0")
    assert [r["request"] for r in record["requests"]] == [0, 1, 2, 3]
    assert all(
        r["prompt_len"] == 6 and r["output_len"] == r["max_tokens"] for r in record["requests"]
    )
    assert Path(tmp_path / "runs" / "plain" / "plan.json").is_file()


def test_the_runs_record_their_arrival_rate(tmp_path):
    """An open-loop sweep's runs carry its Poisson rate (the cost model keys configurations by it);
    a closed loop's is null."""
    spec = SweepSpec(model="tiny-llama", streams=[2], output_len_mean=5, requests_per_stream=2,
                     prompt_len=6, repeats=1, depths=[1], arrival_rate=400.0)  # fmt: skip
    run_sweep(spec, tmp_path, use_nsys=False)
    runs = read_results(tmp_path).runs
    assert list(runs["arrival_rate"]) == [400.0]
    record = read_record(tmp_path / "runs" / "plain", "s2-d1-r0")
    assert record["summary"]["arrival_rate"] == 400.0


def test_a_sweep_cut_short_is_assembled_from_the_runs_that_finished(tmp_path):
    spec = SweepSpec(model="tiny-llama", streams=[2], output_len_mean=5, requests_per_stream=2,
                     prompt_len=6, repeats=2)  # fmt: skip
    run_sweep(spec, tmp_path, use_nsys=False)
    (tmp_path / "results.json.gz").unlink()
    (tmp_path / "runs" / "plain" / "s2-d2-r1.json.gz").unlink()  # the run the timeout cut
    assemble(tmp_path, strict=False)
    runs = read_results(tmp_path).runs
    assert sorted(runs["run_id"]) == ["s2-d1-r0-timeline", "s2-d1-r1-timeline", "s2-d2-r0-timeline"]


def test_repeats_stop_by_the_rule_and_say_why(tmp_path):
    """The unprofiled pass runs a configuration pair by pair (ABBA) until the repeat rule stops it:
    here its budget, spent by the first run, after the minimum of 3 pairs of at most 6. The
    console, the sweep's state and results.json say why; a resumed sweep has nothing left to do."""
    spec = SweepSpec(model="tiny-llama", streams=[2], output_len_mean=5, requests_per_stream=2,
                     prompt_len=6, repeats=6, min_repeats=3, budget_s=0.001)  # fmt: skip
    seen: list[str] = []
    said: list[str] = []
    run_sweep(spec, tmp_path, use_nsys=False, on_run=lambda tag, _: seen.append(tag),
              say=said.append)  # fmt: skip
    assert seen == ["s2-d1-r0", "s2-d2-r0", "s2-d2-r1", "s2-d1-r1", "s2-d1-r2", "s2-d2-r2"]
    (verdict,) = [line for line in said if line.startswith("s2: ")]  # and what the runs met
    assert "not known: budget spent" in verdict
    provenance = read_results(tmp_path).provenance
    (verdict,) = provenance["repeats"]
    assert (
        verdict["stop"] == "budget spent"
        and verdict["pairs"] == 3
        and not verdict["observed_known"]
    )
    assert verdict["streams"] == 2 and verdict["runs"] == seen and verdict["cv_d1_pct"] >= 0
    assert provenance["missing_runs"] == []  # the runs the rule did not need are not missing
    run_sweep(spec, tmp_path, use_nsys=False, resume=True, on_run=lambda tag, _: seen.append(tag))
    assert len(seen) == 6
    # A fixed number of pairs: at most = at least.
    fixed = SweepSpec(model="tiny-llama", streams=[2], repeats=2, min_repeats=2)
    assert fixed.rule().min_pairs == fixed.rule().max_pairs == 2
    # One depth: no pairs, but the forecast's interval is a median's, which needs 6 runs.
    assert SweepSpec(depths=[1]).rule() is None and len(SweepSpec(depths=[1]).runs()) == 3 * 6
    hows = ({"repeats": 3}, {"min_repeats": 8}, {"min_repeats": 8, "repeats": 7})
    assert [SweepSpec(depths=[1], **how).one_depth_runs() for how in hows] == [3, 8, 7]


def test_a_sweep_saved_before_the_out_of_reach_stop_resumes_without_it(tmp_path):
    """sweep.json of an older bubblelab names no out_of_reach: it ran without that stop, reads back
    so, and resumes with its own options."""
    spec = SweepSpec(model="tiny-llama", streams=[2], output_len_mean=5, requests_per_stream=2,
                     prompt_len=6, repeats=2, min_repeats=2)  # fmt: skip
    assert spec.rule().out_of_reach  # on by default
    run_sweep(spec, tmp_path, use_nsys=False)
    saved = json.loads((tmp_path / SPEC_FILE).read_text())
    del saved["out_of_reach"]
    (tmp_path / SPEC_FILE).write_text(json.dumps(saved))
    old = SweepSpec(**read_state(tmp_path)["spec"])
    assert not old.out_of_reach
    run_sweep(old, tmp_path, use_nsys=False, resume=True)  # not refused as other options


@pytest.mark.parametrize("streams,prompt_len", [([1, 8, 32], 32), ([1, 8, 32, 128], 32),
                                               ([4], 100), ([1, 64], 1024), ([3], 7)])  # fmt: skip
def test_a_gpu_sweeps_token_budget_pads_every_admission_as_8192_does(streams, prompt_len):
    budget = prefill_budget(streams, prompt_len, graphs=True)
    assert budget <= 8192 and budget % 512 == 0
    ours, engines = prefill_buckets(budget), prefill_buckets(8192)
    for k in range(1, max(streams) + 1):  # k prompts admitted in one step, as runs.warmup has it
        tokens = k * prompt_len
        if tokens > 8192:
            break
        assert tokens <= budget  # never split where 8192 would not split it
        assert min(b for b in ours if b >= tokens) == min(b for b in engines if b >= tokens)
    assert len(ours) <= len(engines)


def test_a_sweep_without_graphs_keeps_the_engines_token_budget():
    assert prefill_budget([1, 8, 32], 32, graphs=False) == 8192
    assert SweepSpec(model="tiny-llama", device="cpu").max_num_batched_tokens == 8192
    assert SweepSpec(model="tiny-llama", max_num_batched_tokens=64).max_num_batched_tokens == 64
    assert len(prefill_buckets(prefill_budget([1, 8, 32], 32, graphs=True))) == 7  # of 21
