"""costmodel.foreign_zombies: the zombie tax of a trace that does not say how long its requests are.
The trace's length stands in for L only where one batch ran from start to end; where requests
joined mid-run it is a guess, said as one, and the interval reaches the tax at the admissions'
cadence, which covers the true tax on our own committed traces."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bubblelab.costmodel.foreign import pipelining_gain
from bubblelab.costmodel.foreign_zombies import admissions, zombie_tax
from bubblelab.profiling import analysis
from bubblelab.profiling.catalog import connect
from bubblelab.profiling.ingest import ingest
from tests.test_costmodel_foreign import foreign_steps

TRACES = Path(__file__).resolve().parents[1] / "traces"


def steps_of(kinds: str):
    """A table of steps of 1 ms GPU work and 0.3 ms host, 'p' prefill-like and 'd' decode."""
    n = len(kinds)
    return foreign_steps([1.0] * n, [0.3] * n, ["prefill" if k == "p" else "decode" for k in kinds])


@pytest.mark.parametrize(
    ("kinds", "segments", "mid_run"),
    [
        ("p" + "d" * 40, 1, False),  # one batch, its prefill in one step
        ("ppp" + "d" * 40, 1, False),  # one batch, its prefill chunked over three steps
        ("d" * 41, 1, False),  # a trace cut inside one batch
        ("p" + "d" * 20 + "pp" + "d" * 20, 2, True),  # a second batch joined mid-run
        ("d" * 10 + "p" + "d" * 30, 2, True),  # cut: a request ran before the first admission
    ],
)
def test_admissions_cut_the_decode_steps_into_stretches(kinds, segments, mid_run):
    assert admissions(steps_of(kinds)) == (segments, mid_run)


def test_one_batch_takes_its_length_and_a_given_length_wins():
    steps = steps_of("p" + "d" * 40)
    tax = zombie_tax(steps, None, zombies=True)
    assert (tax.L, tax.z, tax.z_max, tax.source) == (41.0, 1 / 41, 1 / 41, "one batch")
    given = zombie_tax(steps, 64, zombies=True)
    assert (given.z, given.z_max, given.source) == (1 / 64, 1 / 64, "given")
    none = zombie_tax(steps, 64, zombies=False)
    assert (none.z, none.z_max, none.source) == (0.0, 0.0, "none")


def test_requests_joining_mid_run_make_the_length_a_guess_and_widen_the_interval():
    """Four batches of 20 decode steps: the trace's length (81) is no request's; the cadence (20)
    is every request's, and the interval's low end charges it."""
    steps = steps_of(("p" + "d" * 20) * 4)
    tax = zombie_tax(steps, None, zombies=True)
    assert tax.source == "trace length (a guess)" and tax.L == 81.0
    assert tax.z == pytest.approx(1 / 81) and tax.z_max == pytest.approx(1 / 20)
    assert "a guess" in tax.line and "--output-len-mean" in tax.line
    gain = pipelining_gain(steps, n_boot=200)
    # steps all alike: the interval is the tax's range, 1.3 / 1.0 x (1 - z)
    assert gain["interval_pct"][0] == pytest.approx(100 * (1.3 * (1 - 1 / 20) - 1), abs=1e-3)
    assert gain["interval_pct"][1] == pytest.approx(30.0, abs=1e-3)
    assert gain["speedup_pct"] == pytest.approx(100 * (1.3 * (1 - 1 / 81) - 1), abs=1e-3)
    assert gain["z_max"] == pytest.approx(1 / 20, abs=1e-6)
    assert gain["output_len_source"] == "trace length (a guess)"
    assert tax.line in gain["assumptions"]
    assert gain["whole_run"]["interval_pct"][0] < gain["whole_run"]["speedup_pct"]


@pytest.mark.parametrize("name", ["qwen3-0.6b-s1-d1", "qwen3-0.6b-s32-d1"])
def test_our_traces_read_as_foreign_bound_the_tax_their_requests_paid(name):
    """Our committed H200 traces, cut to 150 steps from runs of 4 requests a stream (mean generated
    length 117.25 and 111.17 tokens), read as any engine's without L: admissions happen mid-run,
    so the length is said to be a guess, and the interval's low end charges at least 1/L of the
    requests' true length (75 decode steps an admission at 1 stream, 4.4 at 32)."""
    import json

    meta = json.loads((TRACES / "index.json").read_text())[f"{name}.sqlite.gz"]
    con = connect(None)
    run = ingest(TRACES / f"{name}.sqlite.gz", None, {}, con=con, domain="none")
    gain = pipelining_gain(analysis.per_step(con, run), n_boot=200)
    assert gain["output_len_source"] == "trace length (a guess)"
    assert gain["z_max"] >= 1 / meta["mean_generated_len"] > gain["z"]


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="pd", min_size=1, max_size=300).filter(lambda k: "d" in k))
def test_the_interval_always_charges_at_least_the_headline(kinds):
    """Any order of prefill-like and decode steps: the interval's low end charges at least the
    headline's tax, both within (0, 1], the length a guess exactly where an admission follows a
    decode step, and a given length always wins."""
    steps = steps_of(kinds)
    tax = zombie_tax(steps, None, zombies=True)
    assert 0 < tax.z <= tax.z_max <= 1
    assert (tax.source == "trace length (a guess)") == ("dp" in kinds)
    assert tax.L == kinds.count("d") + 1
    assert zombie_tax(steps, 50, zombies=True).z_max == pytest.approx(1 / 50)


def test_a_sweeps_own_trace_takes_its_length_from_the_sweeps_results(tmp_path):
    """A trace run-and-profile left in RUN/traces/run.<n>.sqlite.gz has no index.json; its sweep's
    results name the run it traced (trace_path), whose requests' mean generated length the
    forecast then takes, as it does a committed trace's (qwen3-4b's sweep: run.1 is the 1-stream
    depth-1 run, 117.25 tokens)."""
    import shutil

    from bubblelab.runs.analysis import blocking_forecast
    from bubblelab.runs.traces import index_meta

    sweep = TRACES.parent / "docs/measurements/2026-12-02/compare-h200/qwen3-4b"
    run = tmp_path / "run4b"
    (run / "traces").mkdir(parents=True)
    shutil.copy(sweep / "qwen3-4b.results.json.gz", run / "results.json.gz")
    trace = run / "traces" / "run.1.sqlite.gz"
    shutil.copy(TRACES / "qwen3-0.6b-s1-d1.sqlite.gz", trace)
    meta = index_meta(trace)
    assert (meta["depth"], meta["streams"], meta["mean_generated_len"]) == (1, 1, 117.25)
    gain, _ = blocking_forecast(trace)
    assert gain["output_len_source"] == "given" and gain["z"] == pytest.approx(1 / 117.25, abs=1e-6)
    assert any("recorded with the trace" in line for line in gain["assumptions"])
    stray = tmp_path / "traces" / "run.1.sqlite.gz"  # a traces/ folder with no sweep around it
    stray.parent.mkdir()
    shutil.copy(trace, stray)
    assert index_meta(stray) == {}
    assert blocking_forecast(stray)[0]["output_len_source"] == "trace length (a guess)"
