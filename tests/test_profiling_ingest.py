"""Ingestion on the real H200 probe export (schema 3.20.3) and refusal of every kind of bad
input."""

from __future__ import annotations

import gzip
import sqlite3
from pathlib import Path

import pytest

from bubblelab.core.errors import BubblelabError
from bubblelab.profiling import analysis, queries
from bubblelab.profiling.catalog import connect, one_row
from bubblelab.profiling.ingest import ingest
from testing.synthetic_trace import TraceBuilder
from tests.profiling_trace_builder import blocking_trace

PROBE = Path(__file__).parents[1] / "traces" / "nsys-h200-probe.sqlite"
TABLES = (
    "runs",
    "trace_meta",
    "host_ranges",
    "host_segments",
    "step_info",
    "api_calls",
    "gpu_ops",
    "syncs",
    "gpu_busy",
    "steps",
)


def counts(con) -> dict[str, int]:
    return {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES}


def test_probe_ingests_with_its_metadata(tmp_path):
    con = connect(tmp_path / "c.duckdb")
    run = ingest(PROBE, None, {"model": "bf16 matmul probe", "streams": 1}, domain="probe", con=con)
    assert counts(con) == {
        "runs": 1,
        "trace_meta": 29,
        "host_ranges": 200,
        "host_segments": 350,
        "step_info": 0,
        "api_calls": 1495,
        "gpu_ops": 252,
        "syncs": 0,
        "gpu_busy": 252,
        "steps": 50,
    }  # the probe's `step` ranges carry payloads, its inner ranges none
    row = analysis.runs(con).iloc[0]
    assert (row.run_id, row.model, row.device, row.driver) == (
        run,
        "bf16 matmul probe",
        "NVIDIA H200",
        "580.159.04",
    )
    assert (row.nsys_version, row.schema_version, row.source) == ("2025.3.2.0", "3.20.3", "nsys")
    assert str(row.started_at).startswith("2026-11-21 10:34:14")
    # one stream, no overlap: each op is its own busy island, and the busy time is the sum of the op
    # times
    busy, ops = con.execute(
        'SELECT (SELECT sum("end" - start) FROM gpu_busy), (SELECT sum("end" - start) FROM gpu_ops)'
    ).fetchone()
    assert busy == ops
    # every kernel, copy and memset was launched under a probe range, except the two set-up kernels
    ops = con.execute(
        "SELECT op, phase, count(*) FROM gpu_ops GROUP BY ALL ORDER BY ALL"
    ).fetchall()
    assert ops == [
        ("kernel", "forward", 50),
        ("kernel", "sample", 50),
        ("kernel", None, 2),
        ("memcpy", "commit", 50),
        ("memcpy", "sample", 50),
        ("memset", "forward", 50),
    ]


def test_reingest_is_idempotent_across_sessions(tmp_path):
    path = tmp_path / "c.duckdb"
    con = connect(path)
    first = ingest(PROBE, None, {}, domain="probe", con=con)
    before = counts(con)
    con.close()
    con = connect(path)
    assert ingest(PROBE, None, {"model": "other"}, domain="probe", con=con) == first
    assert counts(con) == before


def test_interrupted_ingest_leaves_no_half_run(tmp_path, monkeypatch):
    con = connect(tmp_path / "c.duckdb")
    real = queries.execute

    def interrupted(c, name, params=None):
        if name == "ingest_kernels":  # ranges, segments and API calls are in by now
            raise KeyboardInterrupt
        return real(c, name, params)

    monkeypatch.setattr(queries, "execute", interrupted)
    with pytest.raises(KeyboardInterrupt):
        ingest(PROBE, None, {}, domain="probe", con=con)
    assert set(counts(con).values()) == {0}
    monkeypatch.setattr(queries, "execute", real)
    ingest(PROBE, None, {}, domain="probe", con=con)
    assert counts(con)["gpu_ops"] == 252


def test_lazily_missing_tables_mean_no_events(tmp_path):
    trace = blocking_trace(tmp_path / "b.sqlite")
    db = sqlite3.connect(trace)
    db.execute("DROP TABLE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")
    db.commit()
    db.close()
    con = connect(None)
    run = ingest(trace, None, {}, con=con)
    assert counts(con)["syncs"] == 0
    assert analysis.per_step(con, run).bubble_ms[:5].tolist() == pytest.approx([0.45] * 5)
    # without sync records the blocking calls are still found by name (6 waits, the bug, the
    # teardown sync)
    syncs = analysis.sync_inventory(con, run).query("event == 'sync'")
    assert len(syncs) == 8 and syncs.flagged.sum() == 1


def one_step(b: TraceBuilder) -> TraceBuilder:
    b.range("launch", 0, 10, 100)
    b.range("forward", 0, 20, 90)
    return b


def test_graph_mode_capture_is_read_by_our_phases(tmp_path):
    """--cuda-graph-trace=graph: the replay is one GPU op of the phase its launch ran in."""
    b = one_step(TraceBuilder())
    corr = b.graph_replay(30, 40, 400, graph_id=3)
    con = connect(None)
    run = ingest(b.write(tmp_path / "graph.sqlite"), None, {}, con=con)
    assert con.execute(
        "SELECT op, name, correlation_id, launched_at, phase, step, graph_node FROM gpu_ops "
        "WHERE run_id = ?",
        [run],
    ).fetchall() == [("graph", "CUDA graph 3 [whole replay]", corr, 30_000, "forward", 0, 3)]
    assert analysis.per_step(con, run).forward_ms.tolist() == pytest.approx([0.36])


def test_graph_launches_without_rows_are_refused(tmp_path):
    b = one_step(TraceBuilder())
    b.call("cudaGraphLaunch_v10000", 30, 32)
    b.kernel("gemm", 40, 50, 60)  # an eager kernel, but the replay's kernels are missing
    with pytest.raises(
        BubblelabError, match=r"1 CUDA graph launches but no graph-node kernels and no whole-graph"
    ):
        ingest(b.write(tmp_path / "nonodes.sqlite"), None, {}, con=connect(None))


def test_node_traced_graphs_are_accepted(tmp_path):
    b = one_step(TraceBuilder())
    b.call("cudaGraphLaunch_v10000", 30, 32)
    b.kernel("gemm", 40, 50, 60, graph_node=7)
    con = connect(None)
    run = ingest(b.write(tmp_path / "nodes.sqlite"), None, {}, con=con)
    assert analysis.per_step(con, run).forward_ms.tolist() == pytest.approx([0.01])


def _refused(trace: Path, match: str, **kwargs) -> str:
    with pytest.raises(BubblelabError, match=match) as info:
        ingest(trace, None, kwargs.pop("meta", {}), con=connect(None), **kwargs)
    message = str(info.value)
    assert "\n" not in message and str(trace) in message
    return message


def test_bad_inputs_are_one_line_errors(tmp_path):
    text = tmp_path / "notes.sqlite"
    text.write_text("this is not a database\n" * 10)
    _refused(text, "not an SQLite file")

    renamed = tmp_path / "renamed.sqlite"  # a .sqlite.gz that lost its .gz
    renamed.write_bytes(gzip.compress(PROBE.read_bytes()[:1000]))
    _refused(renamed, r"a gzip-compressed file; name it \*\.sqlite\.gz")

    cut = tmp_path / "cut.sqlite"
    cut.write_bytes(PROBE.read_bytes()[:200_000])
    _refused(cut, r"truncated SQLite file \(200000 of 393216 bytes\)")

    plain = tmp_path / "plain.sqlite"
    db = sqlite3.connect(plain)
    db.execute("CREATE TABLE t (x)")
    db.commit()
    db.close()
    _refused(plain, "not an Nsight Systems export")

    future = one_step(TraceBuilder(schema_version="4.0.1")).write(tmp_path / "future.sqlite")
    _refused(future, r"unsupported nsys export schema 4\.0\.1 \(bubblelab reads schema 3\.x\)")

    _refused(tmp_path / "missing.sqlite", "no such trace file")
    _refused(tmp_path / "missing.sqlite.gz", "no such trace file")
    _refused(tmp_path / "missing.nsys-rep", "no such trace file")


def test_unknown_metadata_is_refused():
    with pytest.raises(BubblelabError, match="unknown run metadata streamz"):
        ingest(PROBE, None, {"streamz": 8}, domain="probe", con=connect(None))


def test_killed_ingest_leaves_no_half_run(tmp_path):
    """SIGKILL the ingesting process inside its transaction: the catalog comes back without the
    run."""
    import signal
    import subprocess
    import sys
    import time

    catalog, marker = tmp_path / "c.duckdb", tmp_path / "in-transaction"
    script = f"""
import time
from bubblelab.profiling import queries
from bubblelab.profiling.ingest import ingest
real = queries.execute
def slow(con, name, params=None):
    real(con, name, params)
    if name == "ingest_kernels":  # ranges, segments, calls and kernels written, not committed
        open({str(marker)!r}, "w").close()
        time.sleep(60)
queries.execute = slow
ingest({str(PROBE)!r}, {str(catalog)!r}, {{}}, domain="probe")
"""
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=Path(__file__).parents[1])
    deadline = time.monotonic() + 60
    while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert marker.exists(), "the ingest never reached its transaction"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    con = connect(catalog)
    assert set(counts(con).values()) == {0}
    ingest(PROBE, None, {}, domain="probe", con=con)  # and the catalog is still usable
    assert counts(con)["gpu_ops"] == 252


def test_gzipped_trace_is_the_same_run(tmp_path):
    import gzip

    packed = tmp_path / "probe copy.sqlite.gz"
    packed.write_bytes(gzip.compress(PROBE.read_bytes()))
    con = connect(None)
    run = ingest(packed, None, {}, domain="probe", con=con)
    assert (
        ingest(PROBE, None, {}, domain="probe", con=con) == run
    )  # keyed by the decompressed content
    assert analysis.runs(con).trace_path.tolist() == [str(packed)]
    assert counts(con)["gpu_ops"] == 252
    # without the probe's domain it is a foreign trace: another analysis of the same file, another
    # run
    foreign = ingest(packed, None, {}, con=con)
    assert foreign != run and ingest(PROBE, None, {}, con=con) == foreign
    broken = tmp_path / "broken.sqlite.gz"
    broken.write_bytes(gzip.compress(PROBE.read_bytes())[:5000])
    with pytest.raises(BubblelabError, match=r"broken\.sqlite\.gz: cannot decompress"):
        ingest(broken, None, {}, con=connect(None))


def test_catalog_of_another_layout_is_refused(tmp_path):
    from bubblelab.profiling.catalog import CATALOG_VERSION

    path = tmp_path / "old.duckdb"
    connect(path).execute("UPDATE catalog_info SET version = ?", [CATALOG_VERSION - 1]).close()
    with pytest.raises(
        BubblelabError, match=f"has layout {CATALOG_VERSION - 1}, this bubblelab writes layout"
    ):
        connect(path)
    unversioned = tmp_path / "unversioned.duckdb"  # from before catalogs carried a version
    con = connect(unversioned)
    ingest(PROBE, None, {}, domain="probe", con=con)
    con.execute("DELETE FROM catalog_info").close()
    with pytest.raises(BubblelabError, match="has layout 1"):
        connect(unversioned)


def test_a_copied_catalog_holds_the_same_rows_in_no_more_bytes(tmp_path):
    """runs.assemble writes the catalog as a fresh copy of what it ingested (the ingest's free
    blocks left behind): every table and row the same, and it opens as a catalog."""
    from bubblelab.profiling.catalog import copy_catalog

    ingested, copied = tmp_path / "ingested.duckdb", tmp_path / "catalog.duckdb"
    con = connect(ingested)
    run = ingest(PROBE, None, {}, con=con)
    con.close()
    copy_catalog(ingested, copied)

    def rows(path: Path) -> dict[str, int]:
        con = connect(path, read_only=True)
        names = [r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()]
        out = {n: one_row(con, f'SELECT count(*) FROM "{n}"')[0] for n in names}
        con.close()
        return out

    assert rows(copied) == rows(ingested) and sum(rows(copied).values()) > 0
    assert copied.stat().st_size <= ingested.stat().st_size
    con = connect(copied, read_only=True)
    assert len(analysis.per_step(con, run)) > 0
    con.close()
