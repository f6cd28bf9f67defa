"""A fuzz pass over the two readers of untrusted files (issue #14 item 7): nsys traces (ingest and
analysis) and run directories' results.json. Mutated real files either read or fail with one
BubblelabError: no other exception, no hang (a deadline per example), bounded memory; a trace that
reads gives figures that hold their invariants (`check_figures`)."""

from __future__ import annotations

import gzip
import json
import os
import resource
import shutil
import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bubblelab.core.errors import BubblelabError
from bubblelab.profiling import analysis, overview
from bubblelab.profiling.catalog import connect
from bubblelab.profiling.ingest import ingest
from bubblelab.report.report import render_report
from bubblelab.runs.demo import write_demo_run_dir
from bubblelab.runs.rundir import load_document, read_results
from tests.profiling_trace_builder import blocking_trace

FUZZ = settings(
    # BUBBLELAB_FUZZ_EXAMPLES=2000 for a deeper pass than CI's
    max_examples=int(os.environ.get("BUBBLELAB_FUZZ_EXAMPLES", 40)),
    deadline=20_000,  # ms per example: a hang fails the test
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize="BUBBLELAB_FUZZ_EXAMPLES" not in os.environ,  # CI: the same corpus every run
)
MEMORY_GROWTH_MB = 1500


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@pytest.fixture(scope="module", autouse=True)
def start_peak_mb() -> float:
    return peak_mb()


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    return blocking_trace(tmp_path_factory.mktemp("fuzz") / "seed.sqlite")


@pytest.fixture(scope="module")
def results_doc(tmp_path_factory) -> dict:
    run_dir = tmp_path_factory.mktemp("seed")
    write_demo_run_dir(run_dir, streams=(1,), requests_per_stream=2, output_len=8)
    return load_document(run_dir / "results.json.gz")


# -- traces ----------------------------------------------------------------------------------------
TABLES = ("NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME",
          "CUPTI_ACTIVITY_KIND_MEMCPY", "StringIds", "META_DATA_EXPORT")  # fmt: skip
VALUES = st.one_of(
    st.none(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.binary(max_size=20),
)
SQL_MUTATION = st.one_of(
    st.tuples(st.just("drop"), st.sampled_from(TABLES)),
    st.tuples(
        st.just("set"), st.sampled_from(TABLES), st.integers(0, 12), st.integers(0, 50), VALUES
    ),
    st.tuples(st.just("duplicate"), st.sampled_from(TABLES)),
    st.tuples(st.just("swap"), st.sampled_from(TABLES)),
)


def mutate_sql(path: Path, mutation: tuple) -> None:
    db = sqlite3.connect(path)
    kind, table = mutation[0], mutation[1]
    columns = [r[1] for r in db.execute(f'PRAGMA table_info("{table}")')]
    if kind == "drop":
        db.execute(f'DROP TABLE IF EXISTS "{table}"')
    elif kind == "set" and columns:
        column = columns[mutation[2] % len(columns)]
        db.execute(
            f'UPDATE "{table}" SET "{column}" = ? WHERE rowid % 51 = ?', [mutation[4], mutation[3]]
        )
    elif kind == "duplicate" and columns:
        db.execute(f'INSERT INTO "{table}" SELECT * FROM "{table}"')
    elif kind == "swap" and {"start", "end"} <= set(columns):
        db.execute(f'UPDATE "{table}" SET start = "end", "end" = start')
    db.commit()
    db.close()


def mutate_bytes(path: Path, flips: list[tuple[int, int]], cut: int | None) -> None:
    data = bytearray(path.read_bytes())
    for at, value in flips:
        data[at % len(data)] = value
    path.write_bytes(bytes(data[:cut] if cut is not None else data))


def read_trace(path: Path) -> None:
    """Read whole (one run, analysed) or refused in one line."""
    con = connect(None)
    try:
        run_id = ingest(path, None, {}, con=con)
        report = overview.analyze(con, [run_id], 1)
        check_figures(con, run_id, report["runs"][0])
    except BubblelabError as e:
        report = {"refused": str(e)}
    finally:
        con.close()
    if "refused" in report:
        assert report["refused"] and "\n" not in report["refused"]
    else:
        assert [run["run_id"] for run in report["runs"]] == [run_id]


def check_figures(con, run_id: str, run: dict) -> None:
    """What a mutated trace that reads must still give: steps >= 0, shares in [0, 1], per step
    busy <= period and no negative time, and `sure` only with nothing dropped at ingest."""
    assert run["steps"] >= 0
    for share in ("bubble_share", "host_late_share"):
        assert run[share] is None or 0 <= run[share] <= 1, (share, run[share])
    steps = analysis.per_step(con, run_id)
    timed = steps[steps.period_ms.notna()]
    assert (timed.period_ms >= 0).all()
    assert (timed.busy_ms <= timed.period_ms + 1e-9).all()
    found = run["steps_found"]
    assert not (found["sure"] and any("dropped" in c for c in found["checks"]))


@FUZZ
@given(mutations=st.lists(SQL_MUTATION, min_size=1, max_size=3))
def test_mutated_tables_read_or_fail_in_one_line(trace, tmp_path, mutations):
    path = tmp_path / "mutated.sqlite"
    shutil.copyfile(trace, path)
    for mutation in mutations:
        mutate_sql(path, mutation)
    read_trace(path)


@FUZZ
@given(
    flips=st.lists(st.tuples(st.integers(0, 2**20), st.integers(0, 255)), max_size=8),
    cut=st.one_of(st.none(), st.integers(0, 2**16)),
    gzipped=st.booleans(),
)
def test_damaged_trace_files_fail_in_one_line(trace, tmp_path, flips, cut, gzipped):
    path = tmp_path / "damaged.sqlite"
    shutil.copyfile(trace, path)
    mutate_bytes(path, flips, cut)
    if gzipped:
        packed = path.with_name("damaged.sqlite.gz")
        packed.write_bytes(gzip.compress(path.read_bytes())[: (cut or 10**9)])
        path = packed
    read_trace(path)


# -- results.json ----------------------------------------------------------------------------------
JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


def mutate_doc(doc, path: list[int], value, delete: bool):
    """Replace (or delete) the node reached by following `path` choices through the document."""
    node, key = doc, None
    for choice in path:
        children = (
            list(node.items())
            if isinstance(node, dict)
            else list(enumerate(node))
            if isinstance(node, list)
            else []
        )
        if not children:
            break
        key, child = children[choice % len(children)]
        if not isinstance(child, (dict, list)) or not child:
            break
        node = child
    else:
        return doc
    if key is None:
        return value
    parent_children = node
    if delete and isinstance(parent_children, dict):
        parent_children.pop(key, None)
    elif isinstance(parent_children, (dict, list)):
        parent_children[key] = value
    return doc


@FUZZ
@given(
    edits=st.lists(
        st.tuples(
            st.lists(st.integers(0, 100), min_size=1, max_size=5), JSON_VALUES, st.booleans()
        ),
        min_size=1,
        max_size=4,
    ),
    cut=st.one_of(st.none(), st.integers(0, 5000)),
    gzipped=st.booleans(),
)
def test_mutated_results_read_or_fail_in_one_line(results_doc, tmp_path, edits, cut, gzipped):
    doc = json.loads(json.dumps(results_doc))
    for path, value, delete in edits:
        doc = mutate_doc(doc, path, value, delete)
    text = json.dumps(doc)[:cut].encode()
    run_dir = tmp_path / "run"
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir()
    if gzipped:
        (run_dir / "results.json.gz").write_bytes(gzip.compress(text))
    else:
        (run_dir / "results.json").write_bytes(text)
    try:
        results = read_results(run_dir)
    except BubblelabError as e:
        results = str(e)
    if isinstance(results, str):  # refused in one line
        assert results and "\n" not in results
    else:  # read: every table the readers compute with, none empty
        assert len(results.runs) and len(results.steps) and "run_id" in results.steps


@settings(FUZZ, max_examples=max(20, FUZZ.max_examples // 4))  # a report takes a second
@given(
    edits=st.lists(
        st.tuples(
            st.lists(st.integers(0, 100), min_size=1, max_size=5), JSON_VALUES, st.booleans()
        ),
        min_size=1,
        max_size=3,
    )
)
def test_a_report_of_a_mutated_results_json_renders_or_fails_in_one_line(
    results_doc, tmp_path, edits
):
    """`bubblelab report` reads what read_results accepted: no TypeError deep in a figure."""
    doc = json.loads(json.dumps(results_doc))
    for path, value, delete in edits:
        doc = mutate_doc(doc, path, value, delete)
    run_dir = tmp_path / "run"
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir()
    (run_dir / "results.json").write_text(json.dumps(doc))
    try:
        page = render_report(read_results(run_dir), "fuzz", n_boot=10)
    except BubblelabError as e:
        page = f"refused: {e}"
    if page.startswith("refused: "):
        assert "\n" not in page
    else:
        assert page.lstrip().lower().startswith("<!doctype html") and "fuzz" in page


def test_a_gzip_bomb_is_refused_not_inflated(tmp_path):
    with gzip.open(tmp_path / "results.json.gz", "wb") as f:
        for _ in range(300):  # 300 MiB of spaces inflated, 0.3 MiB on disk
            f.write(b" " * (1 << 20))
    with pytest.raises(BubblelabError, match="larger than 256 MiB"):
        read_results(tmp_path)


def test_memory_stayed_bounded(start_peak_mb):
    """Runs last in this module: nothing above ballooned the process (ru_maxrss is a peak)."""
    assert peak_mb() - start_peak_mb < MEMORY_GROWTH_MB
