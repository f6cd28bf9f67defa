"""Tensor parallelism on the CPU (issue #18): gloo, one process per rank, the tiny models.

Greedy tokens at TP 2 equal TP 1 (fp32); depth 1 == depth 2 at TP 2 over random workloads
(constraints, sampling, preemption, arrivals, aborts); every rank idle after a run; a worker that
dies or hangs ends the run with a WorkerError within seconds and leaves no process behind; per-rank
timelines; TP 1 stays one process.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
import time

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bubblelab.core.errors import BubblelabError, WorkerError
from bubblelab.engine.config import EngineConfig, ModelConfig
from bubblelab.engine.distributed.handoff import HEADER_WORDS, ShmRing
from bubblelab.engine.llm_engine import LLMEngine
from bubblelab.engine.loader import load_model
from bubblelab.engine.model_runner import ModelRunner
from bubblelab.engine.models import TransformerLM
from bubblelab.engine.parallel.comm import NO_MULTICAST_ENV, TensorParallel
from bubblelab.engine.parallel.layers import shard
from bubblelab.engine.sampling_params import SamplingParams
from bubblelab.runs.driver import run_workload
from bubblelab.runs.workload import WorkloadSpec
from tests.engine_helpers import Req, make_engine, make_tp_engine, random_workload, run_script

SEEDS = {"tiny-llama": 1, "tiny-qwen3": 2}  # the conftest fixtures' seeds


def _prompts(n: int, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(3, 512, rng.integers(1, 24)).tolist() for _ in range(n)]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


# -- the model split -------------------------------------------------------------------------------
@pytest.mark.parametrize("preset", ["tiny-llama", "tiny-qwen3"])
def test_the_shards_of_every_rank_put_together_are_the_single_gpu_weights(preset):
    whole = dict(load_model(preset, seed=SEEDS[preset]).model.named_parameters())
    ranks = [
        dict(
            load_model(preset, seed=SEEDS[preset], tp=TensorParallel(r, 2)).model.named_parameters()
        )
        for r in range(2)
    ]
    cfg = load_model(preset).config
    q, kv, inter = (
        cfg.num_heads * cfg.head_dim,
        cfg.num_kv_heads * cfg.head_dim,
        cfg.intermediate_size,
    )
    for name, full in whole.items():
        parts = [r[name] for r in ranks]
        if "qkv_proj" in name or "gate_up_proj" in name:
            sections = [q, kv, kv] if "qkv_proj" in name else [inter, inter]
            split = [
                p.split([s // 2 for s in sections]) for p in parts
            ]  # each rank: its part of each
            rebuilt = torch.cat([torch.cat(pair) for pair in zip(*split, strict=True)])
        elif "o_proj" in name or "down_proj" in name:
            rebuilt = torch.cat(parts, dim=1)
        elif "embed_tokens" in name or "lm_head" in name:
            rebuilt = torch.cat(parts)
        else:  # norms: every rank holds all of it
            assert all(torch.equal(p, full) for p in parts), name
            continue
        assert torch.equal(rebuilt, full), name


def test_a_vocabulary_the_ranks_do_not_divide_is_padded_with_zero_rows():
    full = torch.arange(10.0).view(5, 2)
    parts = [shard(full, 0, TensorParallel(r, 2)) for r in range(2)]
    assert [p.shape for p in parts] == [(3, 2), (3, 2)]
    assert torch.equal(torch.cat(parts)[:5], full) and not parts[1][2].any()


def test_a_split_that_does_not_divide_the_heads_is_refused():
    cfg = ModelConfig("llama", 512, 64, 128, 2, 6, 2, 16)  # 6 heads, 2 KV heads
    from bubblelab.engine.attention import select_backend

    with pytest.raises(BubblelabError, match="does not divide the model's KV heads"):
        TransformerLM(cfg, select_backend("torch", "cpu"), TensorParallel(0, 3))
    with pytest.raises(BubblelabError, match="tensor parallel 3 needs|does not divide"):
        LLMEngine(EngineConfig(model="tiny-llama", tensor_parallel=3))
    assert not mp.active_children()


# -- the hand-off ring -----------------------------------------------------------------------------
def test_the_ring_delivers_every_message_in_order_and_waits_for_a_slow_reader():
    ctx = mp.get_context("spawn")
    ready, space = [ctx.Semaphore(0)], [ctx.Semaphore(ShmRing.SLOTS)]
    ring = ShmRing.make(64, ready, space)
    reader = ShmRing(ring.spec, ready, space, create=False)
    got, gate = [], threading.Event()

    def read() -> None:
        gate.wait()
        for _ in range(3 * ShmRing.SLOTS):
            header, payload = reader.recv(0, lambda: None)
            got.append((int(header[1]), bytes(payload)))
            reader.release(0)

    thread = threading.Thread(target=read)
    thread.start()
    checks = []
    for i in range(3 * ShmRing.SLOTS):
        header = np.zeros(HEADER_WORDS, np.int64)
        header[1] = i
        # The reader waits at the gate: the writer fills the ring, then must wait (and check) for
        # space.
        ring.send(header, np.full(i % 5, i, np.uint8), lambda r: (checks.append(r), gate.set()))
    thread.join()
    assert got == [(i, bytes([i] * (i % 5))) for i in range(3 * ShmRing.SLOTS)]
    assert checks and set(checks) == {0}
    reader.close()
    ring.close(unlink=True)


# -- tokens ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("preset", ["tiny-llama", "tiny-qwen3"])
def test_greedy_tokens_at_tp_2_equal_tp_1(preset, request):
    loaded = request.getfixturevalue(preset.replace("-", "_"))
    lens = [5, 17, 1, 30, 9, 22]
    reqs = [
        Req(f"r{i}", p, SamplingParams(max_tokens=n, ignore_eos=True), arrive_tick=i)
        for i, (p, n) in enumerate(zip(_prompts(6, seed=3), lens, strict=True))
    ]
    tp1 = run_script(make_engine(loaded), reqs)
    engine = make_tp_engine(preset, SEEDS[preset])
    try:
        tp2 = run_script(engine, reqs)  # run_script ends with check_idle: on every rank
    finally:
        engine.close()
    assert tp2.tokens == tp1.tokens
    assert (
        len(set(map(tuple, tp1.tokens.values()))) > 1
    )  # a model that always says the same proves nothing


@settings(
    max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_depth_1_and_depth_2_give_identical_tokens_at_tp_2(data):
    reqs = random_workload(data)
    pages = data.draw(st.sampled_from([24, 256]), label="kv pages")  # 24 forces preemption
    out = {}
    for depth in (1, 2):
        engine = make_tp_engine("tiny-llama", 1, depth=depth, num_kv_blocks=pages, max_model_len=80)
        try:
            out[depth] = run_script(engine, reqs)
        finally:
            engine.close()
    aborted = {r.rid for r in reqs if r.abort_tick is not None}
    for r in reqs:
        a, b = out[1].tokens[r.rid], out[2].tokens[r.rid]
        if r.rid in aborted:  # an abort lands at a different point of the stream
            k = min(len(a), len(b))
            assert a[:k] == b[:k]
        else:
            assert a == b and out[1].reasons[r.rid] == out[2].reasons[r.rid]


def test_the_python_api_splits_a_checkpoint_over_three_ranks():
    """LLM(tensor_parallel=3): the embedded SmolLM2 GGUF (9 heads, 3 KV heads) sharded at load over
    three processes answers as one process does (nothing assumes two ranks)."""
    from bubblelab.engine import LLM

    prompt, params = "The capital of France is", SamplingParams(max_tokens=8)
    one = LLM()
    expected = one.generate(prompt, params)[0]
    one.close()
    three = LLM(tensor_parallel=3)
    try:
        got = three.generate(prompt, params)[0]
        three.engine.check_idle()
    finally:
        three.close()
    assert got.token_ids == expected.token_ids and got.text == expected.text
    assert not mp.active_children()


def test_tp_1_is_one_process_on_the_single_gpu_path(tiny_llama):
    engine = make_engine(tiny_llama)
    assert engine.workers is None and type(engine.runner) is ModelRunner
    assert not mp.active_children()
    engine.close()


# -- failures --------------------------------------------------------------------------------------
def _long_run(engine: LLMEngine) -> None:
    for i, p in enumerate(_prompts(4, seed=7)):
        engine.add_request(f"r{i}", p, SamplingParams(max_tokens=100, ignore_eos=True))
    for _ in range(5):
        engine.step()


@pytest.mark.parametrize("how", ["dies", "hangs"])
def test_a_worker_that_dies_or_hangs_ends_the_run_within_seconds_and_leaves_no_process(how):
    engine = make_tp_engine("tiny-llama", 1, tensor_parallel_timeout_s=2.0, max_model_len=128)
    pid = engine.workers.procs[0].pid
    try:
        _long_run(engine)
        os.kill(pid, signal.SIGKILL if how == "dies" else signal.SIGSTOP)
        started = time.monotonic()
        with pytest.raises(WorkerError, match="rank 1") as failure:
            while engine.has_unfinished():
                engine.step()
        took = time.monotonic() - started
        assert took < (1.5 if how == "dies" else 4.0), took
        assert ("SIGKILL" if how == "dies" else "hangs") in str(failure.value)
        with pytest.raises(WorkerError):  # the engine stays failed
            engine.step()
    finally:
        engine.close()
    assert not _alive(pid) and not mp.active_children()


# -- per-rank timelines ----------------------------------------------------------------------------
def test_every_rank_records_its_own_timeline_of_the_run():
    engine = make_tp_engine("tiny-qwen3", 2, max_num_seqs=4)
    spec = WorkloadSpec(
        streams=2, requests=4, output_len_mean=6, output_len_dist="fixed", prompt_len=8
    )
    try:
        result = run_workload(engine, spec, warmup=True)
        engine.check_idle()
    finally:
        engine.close()
    assert result.summary["tensor_parallel"] == 2
    (rank1,) = result.rank_timelines
    steps0, steps1 = set(result.timeline.steps), set(rank1.steps)
    assert steps1 == steps0 and len(steps0) >= 6  # the measured run's steps, not the warm-up's
    hosts = rank1.host_frame()
    assert {"recv", "launch", "copy_h2d", "forward", "prefill", "finalize", "sampling"} <= set(
        hosts.phase
    )
    assert "handoff" in set(result.timeline.host_frame().phase)
    device = rank1.device_frame()
    for phase in ("forward", "sampling"):
        assert set(device[device.phase == phase].step) == steps0
    assert (device.end_ns >= device.start_ns).all()
    # One host clock (CLOCK_MONOTONIC) for every process: a step's forward overlaps across ranks.
    f0 = result.timeline.device_frame().query("phase == 'forward'").set_index("step")
    f1 = device.query("phase == 'forward'").set_index("step")
    overlap = np.minimum(f0.end_ns, f1.end_ns) - np.maximum(f0.start_ns, f1.start_ns)
    assert (overlap > 0).mean() > 0.9


def test_workers_start_with_nvlink_multicast_off():
    engine = make_tp_engine("tiny-llama", 1)
    try:
        assert engine.workers.worker_env == {1: NO_MULTICAST_ENV}
        assert all(os.environ[k] == v for k, v in NO_MULTICAST_ENV.items())
    finally:
        engine.close()


def test_run_and_profile_records_each_rank_as_its_own_run(tmp_path):
    from bubblelab.profiling.catalog import connect
    from bubblelab.runs.sweep import SweepSpec, run_sweep

    spec = SweepSpec(model="tiny-llama", depths=[1, 2], streams=[2], output_len_mean=6, repeats=1,
                     requests_per_stream=1, max_model_len=64, tensor_parallel=2)  # fmt: skip
    run_sweep(spec, tmp_path, use_nsys=False, say=lambda _: None)
    assert not mp.active_children()  # one engine served both depths, closed at the end
    con = connect(tmp_path / "catalog.duckdb")
    runs = con.sql("SELECT run_id, depth, tensor_parallel, rank FROM runs ORDER BY ALL").fetchall()
    assert runs == [(f"s2-d{d}-r0-timeline{s}", d, 2, r) for d in (1, 2)
                    for r, s in ((0, ""), (1, "-rank1"))]  # fmt: skip
    launched = "SELECT count(*) FROM steps WHERE kind IS NOT NULL GROUP BY run_id ORDER BY run_id"
    counts = [n for (n,) in con.sql(launched).fetchall()]  # (rank 0 also has its last, empty plan)
    assert counts[0] == counts[1] > 3 and counts[2] == counts[3] > 3
    con.close()

    # Every rank reaches the export on one clock, and the runs are named with their split.
    from bubblelab.report.export import export
    from bubblelab.runs.tables import config_names
    from tests.test_report_export import check_trace_format, read_trace

    trace = read_trace(export(tmp_path, tmp_path / "x").trace)
    slices = check_trace_format(trace)
    names = {(e["pid"], e.get("tid")): e["args"]["name"] for e in trace["traceEvents"]
             if e["ph"] == "M" and e["name"] in ("process_name", "thread_name")}  # fmt: skip
    for pid in (1, 2):
        assert names[(pid, None)] == f"tiny-llama·tp2·s2·d{pid}·r0"  # as analyze names it
        tracks = {names[key]: len(s) for key, s in slices.items() if key[0] == pid}
        assert {"rank 0 host", "rank 0 CPU", "rank 1 host", "rank 1 CPU"} <= set(tracks)
        assert tracks["rank 1 host"] > 3 and tracks["rank 1 CPU"] == tracks["rank 0 CPU"]
    ranks = [dict(run_id=r, model="tiny-llama", tensor_parallel=2, streams=2, depth=1, rank=k)
             for k, r in enumerate(("a", "a-rank1"))]  # fmt: skip
    assert list(config_names(ranks).values()) == [
        "tiny-llama·tp2·s2·d1·r0",
        "tiny-llama·tp2·s2·d1·r0·rank1",
    ]
