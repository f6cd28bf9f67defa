"""Never confidently wrong (issue #24): on traces built to mislead a step rule, and on traces whose
values cannot be believed, the figures are right or say they are unsure; and figures that must not
move (a uniform time shift, the rows' order) do not."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from bubblelab.core.errors import BubblelabError
from bubblelab.profiling import overview
from bubblelab.profiling.catalog import connect
from bubblelab.profiling.ingest import ingest
from bubblelab.profiling.steps import StepOptions
from testing.synthetic_engines import Engine
from tests.foreign_checks import build, windows

SHIFT = 1 << 62  # ns: a timestamp shifted by ~146 years


def found(con, run: str) -> dict:
    return overview.analyze(con, [run])["runs"][0]


@pytest.mark.parametrize(
    "engine",
    [
        Engine(steps=14, graphs_per_step=4, nodes=24),  # piecewise graphs around attention
        Engine(steps=14, graphs_per_step=16, nodes=32),  # XLA's command buffers, one per layer
    ],
    ids=["4-graphs", "16-graphs"],
)
def test_a_step_of_several_graph_replays_is_one_step(tmp_path, engine):
    """Each replay is not a step: the rule chosen finds the engine's steps and is sure of them; the
    graph rule, forced, counts every replay and says it is not sure, naming the runner-up."""
    trace, (truth,) = build(tmp_path / "t.sqlite", engine)
    con = connect(None)
    run = ingest(trace, None, {}, con=con)
    summary = found(con, run)["steps_found"]
    assert summary["rule"] != "graph"
    assert summary["steps"] == engine.steps and summary["sure"], summary["unsure"]
    assert windows(con, run) == truth.windows
    forced = ingest(trace, None, {}, steps=StepOptions(rule="graph"), con=con)
    summary = found(con, forced)["steps_found"]
    assert summary["steps"] == (engine.steps - 1) * engine.graphs_per_step  # an eager prefill
    assert not summary["sure"] and summary["confidence"] != "high"
    assert "runner-up" in summary["unsure"] and "--step-rule graph|" in summary["unsure"]


@pytest.mark.parametrize("wait", ["futex", "callback"])
def test_a_wait_outside_the_cuda_api_opens_steps_by_the_pause(tmp_path, wait):
    """JAX-like: the engine thread sleeps in a futex until a host callback fires, no blocking CUDA
    call; the tokens come back on a helper thread (futex) or stay on the GPU (callback). The pause
    rule finds each step from its first launch; sure only where the read of the tokens confirms
    it."""
    engine = Engine(steps=14, wait=wait, graphs_per_step=8, nodes=16)
    trace, (truth,) = build(tmp_path / "t.sqlite", engine)
    con = connect(None)
    run = ingest(trace, None, {}, con=con)
    summary = found(con, run)["steps_found"]
    assert (summary["rule"], summary["steps"]) == ("pause", engine.steps)
    assert [s for s, _ in windows(con, run)] == [s for s, _ in truth.launch_windows]
    if wait == "futex":
        assert summary["sure"] and "device-to-host read" in summary["evidence"]
    else:  # nothing but the pauses says where a step is
        assert not summary["sure"] and "runner-up graph" in summary["unsure"]


def test_reads_mid_step_alike_the_closing_one_leave_it_unsure(tmp_path):
    """The logits read mid-step, then as much host work as the step's bookkeeping: two syncs a step
    no sync rule can tell apart. Whatever rule is chosen, it does not claim to be sure."""
    trace, _ = build(tmp_path / "t.sqlite", Engine(steps=14, mid_reads=1))
    con = connect(None)
    summary = found(con, ingest(trace, None, {}, con=con))["steps_found"]
    assert not summary["sure"] and summary["confidence"] != "high"
    assert "settles it" in summary["unsure"]


def _mutated(trace: Path, tmp_path: Path, *statements: str) -> Path:
    out = tmp_path / f"m{len(list(tmp_path.iterdir()))}.sqlite"
    db = sqlite3.connect(trace)
    db.execute(f"VACUUM INTO '{out}'")
    db.close()
    db = sqlite3.connect(out)
    for statement in statements:
        db.execute(statement)
    db.commit()
    db.close()
    return out


FIGURES = ("steps", "bubble_share", "host_late_share")


def figures(con, run: str) -> dict:
    summary = found(con, run)
    medians = {c: summary[f"{c}_ms"]["median"] for c in ("period", "bubble", "forward")}
    return {**{k: summary[k] for k in FIGURES}, **medians}


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    """A plain engine trace and its figures."""
    trace, _ = build(tmp_path_factory.mktemp("clean") / "t.sqlite", Engine(steps=30))
    con = connect(None)
    return trace, figures(con, ingest(trace, None, {}, con=con))


def test_a_uniform_time_shift_changes_no_figure(clean, tmp_path):
    trace, want = clean
    shifted = _mutated(
        trace,
        tmp_path,
        *(
            f'UPDATE {t} SET start = start + {SHIFT}, "end" = "end" + {SHIFT}'
            for t in (
                "CUPTI_ACTIVITY_KIND_KERNEL",
                "CUPTI_ACTIVITY_KIND_MEMCPY",
                "CUPTI_ACTIVITY_KIND_MEMSET",
                "CUPTI_ACTIVITY_KIND_RUNTIME",
                "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
                "NVTX_EVENTS",
                "OSRT_API",
            )
        ),
    )
    con = connect(None)
    run = ingest(shifted, None, {}, con=con)
    assert figures(con, run) == pytest.approx(want)
    assert found(con, run)["steps_found"]["checks"] == []


def test_a_reordering_of_rows_changes_no_figure(clean, tmp_path):
    trace, want = clean
    statements = []
    for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME"):
        statements += [
            f"CREATE TABLE r AS SELECT * FROM {t} ORDER BY start DESC",
            f"DELETE FROM {t}",
            f"INSERT INTO {t} SELECT * FROM r",
            "DROP TABLE r",
        ]
    con = connect(None)
    run = ingest(_mutated(trace, tmp_path, *statements), None, {}, con=con)
    assert figures(con, run) == pytest.approx(want)


def test_kernels_ending_before_they_start_are_dropped_and_said(clean, tmp_path):
    """Every 30th kernel's end before its start: dropped and counted in one line, the run not
    sure; a tenth of them: the run is refused, its figures would rest on what is left."""
    trace, want = clean
    few = _mutated(
        trace,
        tmp_path,
        'UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = start - 1000 WHERE rowid % 30 = 0',
    )
    con = connect(None)
    run = ingest(few, None, {}, con=con)
    summary = found(con, run)["steps_found"]
    assert not summary["sure"] and summary["confidence"] != "high"
    assert len(summary["checks"]) == 1
    assert summary["checks"][0].endswith("GPU ops dropped: end before start")
    many = _mutated(
        trace,
        tmp_path,
        'UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = start - 1000 WHERE rowid % 10 = 0',
    )
    with pytest.raises(
        BubblelabError, match=r"GPU ops cannot be believed \(\d+ end before start"
    ) as e:
        ingest(many, None, {}, con=connect(None))
    assert "\n" not in str(e.value)


def test_kernels_shifted_out_of_the_capture_are_dropped(clean, tmp_path):
    """1% of kernels shifted by 2^62 ns: dropped as outside the capture, never a forward of
    years; the figures stay those of the clean trace within the ops lost."""
    trace, want = clean
    shifted = _mutated(
        trace,
        tmp_path,
        f'UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = start + {SHIFT}, "end" = "end" + {SHIFT} '
        "WHERE rowid % 100 = 0",
    )
    con = connect(None)
    run = ingest(shifted, None, {}, con=con)
    summary = found(con, run)
    assert "GPU ops dropped: outside the capture" in summary["steps_found"]["checks"][0]
    assert not summary["steps_found"]["sure"]
    assert summary["steps"] == want["steps"]
    assert summary["period_ms"]["median"] == pytest.approx(want["period"], rel=0.02)
    assert summary["forward_ms"]["median"] < 2 * want["forward"]


def test_a_trace_cut_in_half_gives_the_same_steady_medians(tmp_path):
    """The capture stopped halfway (every row after the middle gone): the steady-state medians are
    those of the whole trace, within noise."""
    trace, _ = build(tmp_path / "t.sqlite", Engine(steps=40, prefill_first=False))
    con = connect(None)
    want = figures(con, ingest(trace, None, {}, con=con))
    db = sqlite3.connect(trace)
    lo, hi = db.execute("SELECT min(start), max(start) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()
    db.close()
    half = _mutated(
        trace,
        tmp_path,
        *(
            f"DELETE FROM {t} WHERE start > {(lo + hi) // 2}"
            for t in (
                "CUPTI_ACTIVITY_KIND_KERNEL",
                "CUPTI_ACTIVITY_KIND_MEMCPY",
                "CUPTI_ACTIVITY_KIND_MEMSET",
                "CUPTI_ACTIVITY_KIND_RUNTIME",
                "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
                "NVTX_EVENTS",
                "OSRT_API",
            )
        ),
    )
    got = figures(con, ingest(half, None, {}, con=con))
    assert got["steps"] == pytest.approx(want["steps"] / 2, abs=4)  # less the warm-up steps
    for figure in ("period", "bubble", "forward", "bubble_share"):
        assert got[figure] == pytest.approx(want[figure], rel=0.02), figure


def test_ops_overlapping_on_one_stream_are_counted(clean, tmp_path):
    """A stream runs its ops in order: kernels running on past the next one's start are counted
    in one line (kept: the GPU did run them)."""
    trace, _ = clean
    late = _mutated(
        trace,
        tmp_path,
        'UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = "end" + 1000000 WHERE rowid % 50 = 0',
    )
    con = connect(None)
    checks = found(con, ingest(late, None, {}, con=con))["steps_found"]["checks"]
    assert len(checks) == 1
    assert checks[0].endswith("GPU ops counted: overlap the op before them on their stream")
