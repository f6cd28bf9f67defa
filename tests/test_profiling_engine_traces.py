"""Invariants every committed engine trace (traces/*.sqlite.gz, domain bubblelab) must satisfy.

Skipped until such traces are committed; each one is checked on its own.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from profiling import analysis
from profiling.catalog import connect
from profiling.ingest import ingest

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
    # the idle time is fully accounted for, by phase and by gap
    attribution = analysis.attribution(catalog, run, steady)
    assert attribution.idle_ms.sum() == pytest.approx(steady.bubble_ms.sum(), abs=1e-6)
    gaps = analysis.idle_gaps(catalog, run, steady)
    assert gaps.idle_us.sum() / 1e3 == pytest.approx(steady.bubble_ms.sum(), abs=1e-6)
    # the steady decode loop blocks the host only in `wait` (the bug class the post found)
    syncs = analysis.sync_inventory(catalog, run)
    stalls = syncs[syncs.flagged & syncs.step.isin(steady.step)]
    assert stalls.empty, stalls[["api", "detail", "phase", "step"]].to_string()
