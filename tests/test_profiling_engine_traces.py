"""Invariants every committed engine trace (traces/*.sqlite.gz, domain bubblelab) must satisfy.

Skipped until such traces are committed; each one is checked on its own.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bubblelab.profiling import analysis
from bubblelab.profiling.catalog import connect
from bubblelab.profiling.ingest import ingest

TRACES = sorted((Path(__file__).parents[1] / "traces").glob("*.sqlite.gz"))


@pytest.fixture(scope="module")
def catalog():
    return connect(None)


@pytest.mark.skipif(not TRACES, reason="no engine traces committed in traces/ yet")
@pytest.mark.parametrize("trace", TRACES, ids=[t.name for t in TRACES])
def test_engine_trace_invariants(trace, catalog):
    run = ingest(trace, None, {}, con=catalog)
    steps = analysis.per_step(catalog, run)
    depth = analysis.runs(catalog).set_index("run_id").loc[run].depth
    assert depth in (1, 2) and len(steps) > 0
    timed = steps[steps.period_ms.notna()]
    assert (timed.period_ms > 0).all() and (timed.bubble_ms >= -1e-9).all()
    assert (timed.busy_ms <= timed.period_ms + 1e-9).all()
    steady = analysis.steady_state(steps, warmup=2)
    assert len(steady) > 0, "no steady-state decode steps"
    # one compute stream: the spans are disjoint and inside the period, so bubble = period - forward
    # - sampling
    assert (steady.period_ms - steady.forward_ms - steady.sampling_ms).tolist() == pytest.approx(
        steady.bubble_ms.tolist(), abs=1e-9
    )
    # period - busy = bubble + kernel_gap - other, other being the few us of metadata and sampled-id
    # copies
    other = steady.bubble_ms + steady.kernel_gap_ms - (steady.period_ms - steady.busy_ms)
    assert other.between(0, 0.01).all(), other.describe()
    # the bubble is fully accounted for by phase (both rules), the GPU idle time by gap
    table = analysis.attribution(catalog, run, steady)
    for split in ("time_ms", "began_ms"):
        assert table[split].sum() == pytest.approx(steady.bubble_ms.sum(), abs=1e-6)
    gaps = analysis.idle_gaps(catalog, run, steady)
    assert gaps.idle_us.sum() / 1e3 == pytest.approx(
        (steady.period_ms - steady.busy_ms).sum(), abs=1e-6
    )
    # the loop blocks the host only in `wait` (the bug class the post found); polls and stream waits
    # don't count
    syncs = analysis.sync_inventory(catalog, run)
    assert not syncs.flagged.any(), syncs[syncs.flagged][
        ["api", "detail", "phase", "step"]
    ].to_string()
    assert set(syncs[syncs.event == "sync"].phase) == {"wait"}
