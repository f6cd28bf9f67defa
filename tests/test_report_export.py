"""`bubblelab export`: a Chrome/Perfetto trace that viewers can load (JSON trace event format, one
process per run, properly nested slices per thread, names as data) and Parquet tables that read back
as the run's tables."""

import gzip
import json
import subprocess
import sys
from collections import defaultdict
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from bubblelab.core.errors import BubblelabError
from bubblelab.profiling import analysis
from bubblelab.report import report as report_module
from bubblelab.report.export import export
from bubblelab.report.report import report_run_dir
from bubblelab.runs.demo import write_demo_run_dir
from bubblelab.runs.rundir import read_results, write_results
from bubblelab.runs.sources import open_source
from bubblelab.runs.traces import TRACES_DIR, load_traces

TRACE = TRACES_DIR / "qwen3-0.6b-s1-d1.sqlite.gz"
# Quotes, a backslash, a newline and markup: a name that breaks any trace built by concatenation.
HOSTILE = 'x", "ph": "B"}, {"name": "\\\n</script><script>alert(1)</script>'


def read_trace(path: Path) -> dict:
    return json.loads(gzip.decompress(path.read_bytes()))


def check_trace_format(trace: dict) -> dict[tuple[int, int], list[dict]]:
    """The JSON object format of the trace event spec, as ui.perfetto.dev and chrome://tracing
    read it: complete ('X') events with numeric pid/tid/ts/dur, names for every process and thread,
    and on each thread slices that nest (a viewer drops or mangles slices that overlap without
    nesting). Returns the slices by (pid, tid)."""
    events = trace["traceEvents"]
    assert {e["ph"] for e in events} == {"X", "M"}
    slices: dict[tuple[int, int], list[dict]] = defaultdict(list)
    names = {(e["pid"], e.get("tid"), e["name"]) for e in events if e["ph"] == "M"}
    for e in events:
        if e["ph"] == "X":
            assert isinstance(e["name"], str) and e["name"]
            assert all(isinstance(e[k], int) for k in ("pid", "tid"))
            assert e["ts"] >= 0 and e["dur"] >= 0
            assert isinstance(e["args"]["step"], int | None)
            slices[(e["pid"], e["tid"])].append(e)
    for pid, tid in slices:
        assert (pid, None, "process_name") in names and (pid, tid, "thread_name") in names
    for thread in slices.values():
        open_ends: list[float] = []
        for e in sorted(thread, key=lambda e: (e["ts"], -e["dur"])):
            while open_ends and open_ends[-1] <= e["ts"] + 1e-3:
                open_ends.pop()
            assert not open_ends or e["ts"] + e["dur"] <= open_ends[-1] + 1e-3, e
            open_ends.append(e["ts"] + e["dur"])
    return slices


@pytest.fixture(scope="module")
def trace_export(tmp_path_factory):
    out = tmp_path_factory.mktemp("trace-export")
    return export(TRACE, out), out


def test_trace_of_an_nsys_export_has_every_step(trace_export):
    exported, out = trace_export
    assert exported.every_step
    trace = read_trace(exported.trace)
    slices = check_trace_format(trace)
    source = open_source(TRACE)
    run_id = source.results.runs["run_id"].iloc[0]
    ranges = analysis.trace_ranges(source.catalog, run_id)
    steps = source.results.steps
    by_track = {tid: [e["name"] for e in events] for (_, tid), events in slices.items()}
    threads = {
        e["tid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"
    }
    ops = ("kernels, stream", "copies, stream", "CUDA API, thread")  # test_profiling_kernels
    threads = {t: name for t, name in threads.items() if not name.startswith(ops)}
    assert sorted(threads.values()) == ["GPU", "host", "steps"]
    host, gpu, step_lane = (
        by_track[t]
        for t in sorted(threads, key=lambda t: ["host", "GPU", "steps"].index(threads[t]))
    )
    assert len(host) == (ranges["lane"] == "host").sum()  # every host range of every step
    assert len(gpu) == (ranges["lane"] == "gpu").sum()
    assert gpu.count("prefill") == (steps["kind"] == "prefill").sum()
    assert len(step_lane) == steps["period_ms"].notna().sum()
    periods = [e for e in slices[(1, next(t for t in threads if threads[t] == "steps"))]]
    first = min(periods, key=lambda e: e["ts"])
    row = steps.set_index("step").loc[first["args"]["step"]]
    assert first["dur"] == pytest.approx(row["period_ms"] * 1e3, abs=1e-3)
    assert first["args"]["bubble_ms"] == pytest.approx(row["bubble_ms"])


def test_trace_of_another_engine(tmp_path):
    """A foreign trace (the probe's matmul loop, steps found by the host sync closing each) exports
    too: its own ranges on the host, its host's sync waits (all a trace without ranges shows of its
    host), each found step's GPU span, its steps."""
    exported = export(TRACES_DIR / "nsys-h200-probe.sqlite", tmp_path)
    slices = check_trace_format(read_trace(exported.trace))
    names = {tid: [e["name"] for e in events] for (_, tid), events in slices.items()}
    assert names[1].count("step") == 50  # the probe's own NVTX ranges
    assert names[50] == ["wait"] * 50  # the host sync closing each step, on "host waits"
    assert names[100] == ["forward"] * 50  # one GPU span a found step, no sampling of its own
    assert len(names[200]) == 49  # the last step has no period


def test_parquet_reads_back_as_the_tables(trace_export):
    exported, out = trace_export
    assert sorted(p.name for p in exported.tables) == [
        "api.parquet",  # kernels and api: tests/test_profiling_kernels.py
        "attribution.parquet",
        "gaps.parquet",
        "kernels.parquet",
        "runs.parquet",
        "steps.parquet",
    ]
    results = open_source(TRACE).results
    pd.testing.assert_frame_equal(
        pd.read_parquet(out / "steps.parquet"), results.steps, check_dtype=False
    )
    pd.testing.assert_frame_equal(
        pd.read_parquet(out / "attribution.parquet"), results.attribution, check_dtype=False
    )
    runs = pq.read_table(out / "runs.parquet")
    provenance = json.loads(runs.schema.metadata[b"bubblelab.provenance"])
    assert provenance["traces"] == {TRACE.name: str(TRACE)}
    assert "streams" not in provenance  # traces/index.json names it (no guess from the batch)
    assert runs.column("config").to_pylist() == ["qwen3-0.6b · NVIDIA H200 · 1 stream"]


def test_a_run_export_and_a_trace_export_concatenate_with_their_types(trace_export, tmp_path):
    """One schema per table whatever the source (report.parquet_schema): a run directory's export
    and a trace's have the same columns and pandas types, and pd.concat keeps them."""
    _, trace_out = trace_export
    run_dir = tmp_path / "run"
    write_demo_run_dir(run_dir, streams=(1,), requests_per_stream=2, output_len=16)
    export(run_dir, tmp_path / "out")
    for table in ("runs", "steps", "gaps", "attribution"):
        run = pd.read_parquet(tmp_path / "out" / f"{table}.parquet")
        trace = pd.read_parquet(trace_out / f"{table}.parquet")
        assert list(run.columns) == list(trace.columns), table
        both = pd.concat([run, trace], ignore_index=True)
        assert both.dtypes.equals(run.dtypes) and both.dtypes.equals(trace.dtypes), table
    runs = pd.read_parquet(trace_out / "runs.parquet")
    steps = pd.read_parquet(trace_out / "steps.parquet")
    assert pd.api.types.is_datetime64_any_dtype(runs["started_at"])
    assert runs["depth"].dtype == steps["depth"].dtype == "Int64"
    assert steps["batch_size"].dtype == steps["gpu_start_ns"].dtype == "Int64"
    assert runs["requests"].dtype == "Int64" and steps["period_ms"].dtype == "float64"


def test_run_directory_with_its_catalog_exports_every_step(tmp_path):
    """A sweep leaves catalog.duckdb beside results.json: the export reads every host range from it,
    not only the window results.json keeps."""
    results = load_traces(["qwen3-0.6b-s1-d2.sqlite.gz"], catalog=tmp_path / "catalog.duckdb")
    write_results(
        tmp_path,
        results.runs,
        results.steps,
        results.attribution,
        results.gaps,
        results.provenance,
        results.timeline,
    )
    with_catalog = export(tmp_path, tmp_path / "a")
    (tmp_path / "catalog.duckdb").rename(tmp_path / "elsewhere.duckdb")
    without = export(tmp_path, tmp_path / "b")
    assert with_catalog.every_step and not without.every_step
    host = [
        [e for e in read_trace(x.trace)["traceEvents"] if e["ph"] == "X" and e["tid"] == 1]
        for x in (with_catalog, without)
    ]
    assert len(host[0]) > 5 * len(host[1]) > 0
    assert {e["args"]["step"] for e in host[1]} <= {e["args"]["step"] for e in host[0]}


def test_names_are_data_not_markup_or_syntax(tmp_path):
    run_dir = tmp_path / "run"
    write_demo_run_dir(run_dir, streams=(2,), requests_per_stream=3, output_len=24)
    r = read_results(run_dir)
    r.timeline.loc[r.timeline["phase"] == "plan", "phase"] = HOSTILE
    r.runs["preset"] = HOSTILE
    write_results(run_dir, r.runs, r.steps, r.attribution, r.gaps, r.provenance, r.timeline)
    exported = export(run_dir, tmp_path / "out")
    trace = read_trace(exported.trace)
    check_trace_format(trace)
    names = [e["name"] for e in trace["traceEvents"]]
    assert names.count(HOSTILE) == (r.timeline["phase"] == HOSTILE).sum()
    process_names = [e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"]
    assert all(name.startswith(HOSTILE) for name in process_names)
    assert pd.read_parquet(tmp_path / "out" / "runs.parquet")["preset"].eq(HOSTILE).all()


def test_cli_export(tmp_path):
    run_dir = tmp_path / "run"
    write_demo_run_dir(run_dir, streams=(1,), requests_per_stream=2, output_len=16)
    done = subprocess.run(
        [sys.executable, "-m", "bubblelab", "export", str(run_dir), "--out", str(tmp_path / "x")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [
        str(tmp_path / "x" / name)
        for name in (
            "trace.json.gz",
            "runs.parquet",
            "steps.parquet",
            "gaps.parquet",
            "attribution.parquet",
        )
    ]
    done = subprocess.run(
        [sys.executable, "-m", "bubblelab", "export", str(tmp_path / "missing")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == f"bubblelab: error: {tmp_path / 'missing'} does not exist"


def test_a_reports_export_made_in_its_own_process_is_the_export(tmp_path, monkeypatch):
    """The report of a run directory with its catalog makes its export in a second process while
    it draws the page: the files are exactly what `bubblelab export DIR` writes, and the page links
    them. A failure there is the report's failure."""
    results = load_traces(["qwen3-0.6b-s1-d2.sqlite.gz"], catalog=tmp_path / "catalog.duckdb")
    write_results(tmp_path, results.runs, results.steps, results.attribution, results.gaps,
                  results.provenance, results.timeline)  # fmt: skip
    page = report_run_dir(tmp_path, n_boot=20)
    inline = export(tmp_path, tmp_path / "inline")
    assert read_trace(tmp_path / "export" / "trace.json.gz") == read_trace(inline.trace)
    for table in inline.tables:
        assert pq.read_table(tmp_path / "export" / table.name).equals(pq.read_table(table))
    assert 'href="export/trace.json.gz"' in page.read_text()

    monkeypatch.setattr(report_module, "exporting_apart", _failing_apart)
    with pytest.raises(BubblelabError, match="the export process failed"):
        report_run_dir(tmp_path, n_boot=20)


@contextmanager
def _failing_apart(run_dir, out_dir):
    failed: Future = Future()
    failed.set_exception(BubblelabError("the export process failed"))
    yield failed


def test_an_export_over_an_earlier_one_keeps_none_of_its_tables(tmp_path):
    """A trace's export has kernels and api; a run directory without a catalog has none. Written
    into the same folder, the second leaves no table of the first behind for a glob to join."""
    out = tmp_path / "out"
    first = export(TRACE, out)
    assert {p.name for p in first.tables} >= {"kernels.parquet", "api.parquet"}
    run_dir = tmp_path / "run"
    write_demo_run_dir(run_dir, streams=(1,), requests_per_stream=2, output_len=16)
    (run_dir / "catalog.duckdb").unlink(missing_ok=True)
    second = export(run_dir, out)
    assert sorted(out.glob("*.parquet")) == sorted(second.tables)
    assert not (out / "kernels.parquet").exists()
    (out / "notes.txt").write_text("mine")  # a file that is not a table of ours stays
    export(run_dir, out)
    assert (out / "notes.txt").read_text() == "mine"
