"""Trace-derived text is data everywhere (issue #14 item 4): names that are rich markup, HTML, SQL,
carry newlines, run to 10k characters or are not UTF-8 go through analyze (tables and JSON), the
report and the export (Perfetto trace and Parquet) without crashing, without being interpreted, and
without splitting a line."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pandas as pd
import pytest

from bubblelab.cli import main
from bubblelab.profiling.catalog import connect
from bubblelab.profiling.ingest import ingest
from bubblelab.report.report import report_run_dir
from bubblelab.runs.rundir import write_results
from bubblelab.runs.tables import collect
from testing.synthetic_trace import DTOH, HTOD, TraceBuilder
from tests.test_report_export import check_trace_format, read_trace

MARKUP = "[/bold]x[red]y"
HTML = "<script>alert(1)</script>"
NEWLINE = "first\nsecond"
LONG = "k" * 10_000
MATH = r"cost $\frac{ and $x^"  # matplotlib's mathtext raised on it in the report's figures
SQL = "x'); DROP TABLE runs; --\"\\"  # quotes and a backslash: SQL or JSON built by concatenation
INVALID = "PLACEHOLDER-INVALID-UTF8"  # rewritten to bytes that are not UTF-8 after writing
HOSTILE = [MARKUP, HTML, NEWLINE, LONG, SQL]


def hostile_trace(path: Path, names: list[str]) -> Path:
    """The blocking trace's shape (1 ms steps), with the GPU idling inside a host range and a
    kernel named after each hostile string in turn."""
    b = TraceBuilder()
    for k in range(12):
        t = 10000 + 1000 * k
        name = names[k % len(names)]
        b.range("plan", k, t, t + 100)
        b.range("launch", k, t + 100, t + 300)
        b.mark(k, f"kind={'prefill' if k == 0 else 'decode'} bs=4 tokens=4 depth=1", t + 100)
        b.memcpy(t + 115, t + 140, t + 150, HTOD)
        b.range("forward", k, t + 150, t + 290)
        b.kernel(name, t + 160, t + 200, t + 700)
        b.range("finalize", k, t + 300, t + 400)
        b.range("sampling", k, t + 310, t + 340)
        b.kernel("argmax", t + 320, t + 700, t + 750)
        b.memcpy(t + 355, t + 750, t + 760, DTOH)
        b.range("commit", k, t + 400, t + 900)
        b.range("wait", k, t + 410, t + 770)
        b.range(name, k, t + 700, t + 769)  # the bubble begins in here
        b.sync("cudaEventSynchronize_v3020", t + 420, t + 765, sync_type=1)
    b.write(path)
    db = sqlite3.connect(path)
    db.execute(
        "UPDATE StringIds SET value = CAST(X'fffe5b6261645d' AS TEXT) WHERE value = ?",
        [INVALID],
    )
    db.commit()
    db.close()
    return path


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    return hostile_trace(tmp_path_factory.mktemp("hostile") / "hostile.sqlite", HOSTILE)


def run_cli(argv: list[str], capsys) -> tuple[str, str]:
    main(argv)
    return capsys.readouterr()


def test_analyze_tables_show_hostile_names_as_text_on_one_line(trace, capsys):
    out, err = run_cli(["analyze", str(trace), "--warmup", "1"], capsys)
    assert err == ""
    assert "[/bold]x[red]y" in out  # shown, not interpreted (rich raised MarkupError on it)
    assert "first\\nsecond" in out and "\nsecond" not in out  # escaped: no split row
    assert HTML in out  # a terminal shows HTML as text
    assert LONG not in out and "kkkk…" in out  # cut to fit a cell
    assert max(map(len, out.splitlines())) <= 120


def test_analyze_json_keeps_every_name_exactly(trace, capsys):
    out, _ = run_cli(["analyze", str(trace), "--warmup", "1", "--json"], capsys)
    report = json.loads(out)
    phases = set(report["runs"][0]["attribution_ms_per_step"]["began"]["phase"])
    assert {MARKUP, HTML, NEWLINE, LONG, SQL} & phases  # the names the bubble began in, unaltered


def test_a_model_name_from_metadata_is_data_too(trace, tmp_path, capsys):
    catalog = tmp_path / "catalog.duckdb"
    con = connect(catalog)
    ingest(trace, None, {"model": f"{MARKUP}{NEWLINE}"}, con=con)
    con.close()
    out, _ = run_cli(["analyze", "--catalog", str(catalog), "--warmup", "1"], capsys)
    assert "[/bold]x[red]yfirst\\nsecond·s4·d1·r0" in out


def refused_or_shown(argv: list[str], trace: Path, capsys) -> None:
    """Refused (exit 2, one line naming the trace) or shown (printable whatever the bytes were)."""
    try:
        main(argv)
        code: object = 0
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    if code:
        assert code == 2 and len(err.splitlines()) == 1 and str(trace) in err, err
    else:
        assert out.strip() and out.encode("utf-8")


def test_invalid_utf8_names_are_refused_or_shown_never_a_traceback(tmp_path, capsys):
    trace = hostile_trace(tmp_path / "invalid.sqlite", [INVALID, "plain"])
    refused_or_shown(["analyze", str(trace), "--warmup", "1"], trace, capsys)


def test_the_report_escapes_hostile_names(tmp_path):
    trace = hostile_trace(tmp_path / "report.sqlite", [*HOSTILE, MATH])
    con = connect(None)
    run_id = ingest(trace, None, {"model": HTML, "depth": 1, "streams": 4}, con=con)
    r = collect(con, [run_id], provenance={HTML: NEWLINE, "long": LONG})
    out = tmp_path / "run"
    write_results(out, r.runs, r.steps, r.attribution, r.gaps, r.provenance, r.timeline)
    html = report_run_dir(out, n_boot=20).read_text()
    assert "<script" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "first\nsecond" in html  # provenance, escaped, inside <pre>


def test_the_export_keeps_hostile_names_as_data(trace, tmp_path, capsys):
    out = tmp_path / "export"
    main(["export", str(trace), "--out", str(out)])
    exported = read_trace(out / "trace.json.gz")
    check_trace_format(exported)  # quotes, newlines and markup did not break the JSON
    names = {e["name"] for e in exported["traceEvents"] if e["ph"] == "X"}
    assert set(HOSTILE) <= names  # each host range as its name, unaltered
    phases = set(pd.read_parquet(out / "attribution.parquet")["phase"])
    assert {MARKUP, HTML, NEWLINE, LONG, SQL} & phases
    assert pd.read_parquet(out / "steps.parquet")["run_id"].nunique() == 1


def test_invalid_utf8_through_report_and_export(tmp_path, capsys):
    trace = hostile_trace(tmp_path / "invalid.sqlite", [INVALID, "plain"])
    for argv in (
        ["export", str(trace), "--out", str(tmp_path / "x")],
        ["report", str(trace), "--out", str(tmp_path / "r" / "report.html"), "--n-boot", "20"],
    ):
        refused_or_shown(argv, trace, capsys)
