"""A sweep's nsys pass is one capture range with each run marked in it (runs.worker); its export is
cut into one trace per run (profiling.trim.split_runs). Checked on a real trace of ours: a cut keeps
its window's steps exactly as the whole trace has them, and nothing of the other window."""

from __future__ import annotations

import gzip
import shutil
import sqlite3
from pathlib import Path

import pytest

from bubblelab.core.contract import RUN_DOMAIN
from bubblelab.core.errors import BubblelabError
from bubblelab.profiling import analysis
from bubblelab.profiling.catalog import connect
from bubblelab.profiling.ingest import ingest
from bubblelab.profiling.trim import split_runs, step_window

TRACE = Path(__file__).parents[1] / "traces" / "qwen3-0.6b-s1-d1.sqlite.gz"
COLUMNS = ["kind", "batch_size", "forward_ms", "busy_ms", "bubble_ms", "kernel_gap_ms"]


def steps_of(trace: Path):
    con = connect(None)
    return analysis.per_step(con, ingest(trace, None, {}, con=con))


@pytest.fixture(scope="module")
def marked(tmp_path_factory) -> tuple[Path, dict[str, tuple[int, int]]]:
    """The trace with two runs marked as the worker marks them: steps 180-219 and 240-279, each
    range from just before its first step to just after its last step's GPU work."""
    path = tmp_path_factory.mktemp("split") / "pass.sqlite"
    with gzip.open(TRACE, "rb") as src, path.open("wb") as dst:
        shutil.copyfileobj(src, dst)
    db = sqlite3.connect(path)
    domain = 1 + db.execute("SELECT max(domainId) FROM NVTX_EVENTS").fetchone()[0]
    tid = db.execute("SELECT globalTid FROM NVTX_EVENTS WHERE eventType = 59 LIMIT 1").fetchone()[0]
    db.execute(
        "INSERT INTO NVTX_EVENTS (start, eventType, globalTid, text, domainId)"
        " VALUES (0, 75, ?, ?, ?)",
        (tid, RUN_DOMAIN, domain),
    )
    windows = {}
    for name, (first, last) in {"s1-d1-r0": (180, 219), "s1-d1-r1": (240, 279)}.items():
        start, end = step_window(db, first, last)
        gpu_end = db.execute(
            'SELECT max("end") FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE start <= ?', (end,)
        ).fetchone()[0]
        windows[name] = (start - 1000, max(end, gpu_end) + 1000)
        db.execute(
            'INSERT INTO NVTX_EVENTS (start, "end", eventType, globalTid, text, domainId)'
            " VALUES (?, ?, 59, ?, ?, ?)",
            (*windows[name], tid, name, domain),
        )
    db.commit()
    db.close()
    return path, windows


def test_each_cut_keeps_its_runs_steps_as_the_whole_trace_has_them(marked, tmp_path):
    path, windows = marked
    names = list(windows)
    cuts = split_runs(path, names, [tmp_path / f"run.{i + 1}.sqlite" for i in range(len(names))])
    whole = steps_of(path)
    for cut, (first, last) in zip(cuts, [(180, 219), (240, 279)], strict=True):
        got = steps_of(cut).reset_index(drop=True)
        want = whole[whole.gpu_start_ns.isin(got.gpu_start_ns)].reset_index(drop=True)
        # the window's steps, and no step of the other window; the steps at its edges may lack the
        # step before or after them (their gaps), the others are the whole trace's to the bit
        assert len(got) == len(want)
        assert set(range(first, last)) <= set(got.step) <= set(range(first - 1, last + 2))
        inner = slice(1, -1)
        for column in COLUMNS:
            assert got[column][inner].tolist() == pytest.approx(
                want[column][inner].tolist(), nan_ok=True
            ), column
    db = sqlite3.connect(cuts[0])
    marks = db.execute("SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 59 AND text LIKE 's1-%'")
    assert marks.fetchone()[0] == 0  # the marks stay out: a cut is a run's trace, no more
    db.close()


def test_a_run_without_its_mark_is_named(marked, tmp_path):
    path, windows = marked
    with pytest.raises(BubblelabError, match="1 of 3 runs.*s8-d1-r0"):
        split_runs(path, [*windows, "s8-d1-r0"], [tmp_path / f"{i}.sqlite" for i in range(3)])


def test_a_pass_captured_whole_leaves_a_trace_per_run_as_a_range_per_run_does(marked, tmp_path):
    from bubblelab.runs.assemble import nsys_reports
    from bubblelab.runs.passes import split_pass

    path, windows = marked
    traces = tmp_path / "traces"
    traces.mkdir()
    export = shutil.copy(path, traces / "run.sqlite")  # nsys numbers reports only of several
    (traces / "run.nsys-rep").write_text("the whole pass")
    cuts = split_pass([Path(export)], list(windows))
    assert nsys_reports(tmp_path) == cuts == [traces / "run.1.sqlite", traces / "run.2.sqlite"]
    assert sorted(p.name for p in traces.iterdir()) == [
        "pass.nsys-rep", "run.1.sqlite", "run.2.sqlite"
    ]  # fmt: skip
    with pytest.raises(BubblelabError, match="2 reports for a pass captured whole"):
        split_pass(cuts, list(windows))


def test_only_a_one_gpu_nsys_pass_is_captured_whole():
    from bubblelab.profiling.nsys import capture_mode

    assert capture_mode({"device": "cuda", "tensor_parallel": 1}) == "pass"
    assert capture_mode({"device": "cuda:1", "tensor_parallel": 1}) == "pass"
    # each rank opens its own ranges; on the CPU nothing opens one (the fake nsys of the tests)
    assert capture_mode({"device": "cuda", "tensor_parallel": 2}) == "run"
    assert capture_mode({"device": "cpu", "tensor_parallel": 1}) == "run"
