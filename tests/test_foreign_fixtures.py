"""The foreign traces of traces/foreign/ (six from an H200: the original nano-vllm raw and with an
NVTX range per step, PyPI nano-vllm-fork, a JAX decode loop, transformers `generate`, a CuPy decode
loop; two from an H100: a step of 13 CUDA graphs, torch.compile reduce-overhead; index.json says how
each was made): what `bubblelab analyze` says about each, pinned
exactly, and every figure computed again by brute force over the raw SQLite rows
(tests/fixture_rows.py, tests/fixture_figures.py: plain Python, none of the SQL).

EXPECTED (tests/foreign_fixtures_expected.json) was written by the analysis (`python -m
tests.pin_foreign_fixtures`, then reviewed): per fixture the step rule and its detail, steps found
(decode, prefill-like: which), period CV, GPU covered and the word for it; the steady steps (count,
first, last); their medians (ms), GPU busy as % of the period, the bubble's share; the idle split;
idle gaps (all, kernel gaps) and their histogram (lower edge us, gaps, kernel gaps); the share of
bubble the host ended late; the bubble per label by the began-in rule and per layer by time (ms a
steady step); the host syncs per steady step (event, API, detail, closes the step, flagged, per
step, kernel before, NVTX range) and the flagged rows of the whole run; what pipelining would buy
(%, 95% interval, T_block, T_pipe, the hand-over's price). The launch gaps that price is read from
are checked row for row.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from tests.fixture_figures import GAP_NS
from tests.fixture_figures import inventory as brute_inventory
from tests.fixture_figures import launch_gaps as launch_gaps_brute
from tests.foreign_fixture_values import NAMES, analysed, brute, brute_rows, entry, per_step_tables

EXPECTED: dict = json.loads((Path(__file__).parent / "foreign_fixtures_expected.json").read_text())


@pytest.mark.parametrize("name", NAMES)
def test_analysis_of_each_fixture_is_pinned(name):
    assert analysed(name) == EXPECTED[name]


@pytest.mark.parametrize("name", NAMES)
def test_every_figure_matches_brute_force(name):
    """The summary figures, all of them, from the raw rows (floats at the pins' rounding)."""
    want = {k: v for k, v in EXPECTED[name].items() if k not in ("run_id", "detail")}
    assert set(brute(name)) == set(want)
    for key, value in brute(name).items():
        assert _close(value, want[key]), key


@pytest.mark.parametrize("name", NAMES)
def test_every_step_matches_brute_force(name):
    """Per step, to the nanosecond: GPU span, kind, period, busy, kernel gaps, bubble, host wait;
    every idle gap of every timed step; every host sync with its step, closing and flagged."""
    steps, gaps, inventory, _ = per_step_tables(name)
    rows, _, windows, want, _ = brute_rows(name)
    assert len(steps) == len(want) == len(windows)
    for row, w in zip(steps.itertuples(), want, strict=True):
        assert (row.step, row.kind, row.gpu_start_ns, row.gpu_end_ns) == (
            w.step, w.kind, w.gpu_start, w.gpu_end,
        )  # fmt: skip
        assert round(row.wait_ms * 1e6) == w.wait
        if not w.timed:
            assert math.isnan(row.period_ms)
            continue
        got = [
            round(x * 1e6) for x in (row.period_ms, row.busy_ms, row.kernel_gap_ms, row.bubble_ms)
        ]
        assert got == [w.period, w.busy, w.kernel_gap, w.bubble]
        assert w.busy + w.kernel_gap + w.bubble == w.period
    assert list(zip(gaps.start_ns, gaps.end_ns, strict=True)) == [g for w in want for g in w.gaps]
    assert ((gaps.end_ns - gaps.start_ns < GAP_NS) == gaps.within.notna()).all()
    rows_ = sorted(brute_inventory(rows, windows), key=lambda r: (r["start"], r["event"]))
    got = list(
        zip(
            inventory.event,
            inventory.api,
            inventory.start_ns,
            inventory.closing,
            inventory.flagged,
            strict=True,
        )
    )
    assert got == [(r["event"], r["api"], r["start"], r["closing"], r["flagged"]) for r in rows_]
    assert [None if pd.isna(s) else int(s) for s in inventory.step] == [r["step"] for r in rows_]
    assert [None if pd.isna(b) else int(b) for b in inventory.bytes] == [r["bytes"] for r in rows_]


@pytest.mark.parametrize("name", NAMES)
def test_every_launch_gap_matches_brute_force(name):
    """The gaps the hand-over is priced from (profiling/sql/launch_handovers.sql), row for row:
    step, length, the kinds of op on either side, queued, bubble, between two launches."""
    _, _, _, launches = per_step_tables(name)
    _, _, _, want, _ = brute_rows(name)
    brute = launch_gaps_brute(brute_rows(name)[0], [s for s in want if s.timed])
    got = [
        (int(r.step), round(r.idle_us * 1e3), _none(r.kind_before), _none(r.kind_after),
         bool(_none(r.queued) or False), bool(r.bubble), bool(r.between_launches))
        for r in launches.itertuples()
    ]  # fmt: skip
    assert got == [
        (g["step"], g["idle"], g["before"], g["after"], g["queued"], g["bubble"], g["between"])
        for g in brute
    ]


def _none(value):
    """None for SQL's NULL however pandas carries it (None, NaN, pd.NA)."""
    return None if value is None or pd.isna(value) else value


def _close(got, want) -> bool:
    """Equal, floats within 2 units of the 6th decimal (sums taken in another order)."""
    if isinstance(want, dict):
        return set(got) == set(want) and all(_close(got[k], want[k]) for k in want)
    if isinstance(want, list):
        return len(got) == len(want) and all(_close(g, w) for g, w in zip(got, want, strict=True))
    if isinstance(want, float) and not isinstance(got, bool):
        return math.isclose(got, want, rel_tol=0, abs_tol=2e-6)
    return got == want


@pytest.mark.parametrize(
    ("name", "graph_steps"),
    [("torch-graphs", 13 * 200), ("torch-compiled", 200)],
)
def test_a_step_of_several_graphs_is_one_step(name, graph_steps):
    """The two engine shapes of issue #24 traced on an H100 (tools/traces/foreign_engines.py):
    200 decode steps each, known from the workload, not from the analysis. One CUDA graph a layer
    (13 replays a step): the graph rule finds a step per replay and loses to the tokens read back;
    torch.compile's graph tree (one replay a step, eager kernels around it): both rules agree.
    Either way the answer is 200 steps (+1: the upload of the next tokens after the last read
    opens a step that never runs), sure, and its period is the workload's wall over its steps."""
    report = _report(name)
    found = report["steps_found"]
    rules = {r["rule"]: r["steps"] for r in found["rules"]}
    assert (found["rule"], found["sure"], found["steps"]) == ("sync", True, 201)
    assert rules["graph"] == graph_steps
    wall_ms = 1e3 * entry(name)["wall_s"]  # timed by the worker around its 200 steps
    assert math.isclose(report["period_ms"]["median"] * 200, wall_ms, rel_tol=0.05)


def _report(name: str) -> dict:
    from bubblelab.profiling import overview
    from bubblelab.profiling.catalog import connect
    from bubblelab.profiling.ingest import ingest
    from tests.foreign_fixture_values import FIXTURES

    con = connect(None)
    run = ingest(FIXTURES / f"{name}.sqlite.gz", None, {}, con=con)
    return overview.analyze(con, [run])["runs"][0]
