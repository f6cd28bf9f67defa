"""Console tables never cut a number (issue #29 item 1): every command's tables, printed at 80, 100
and 200 columns and piped (rich's default width), show every number of the command's JSON whole,
formatted as the table formats it."""

from __future__ import annotations

import json
import re

import pytest
from rich.console import Console
from rich.table import Table

from bubblelab.cli import main
from bubblelab.cli.tables import fitted, records
from tests.cli_helpers import ROOT

FOREIGN = [
    str(ROOT / "traces" / "foreign" / f"{n}.sqlite.gz") for n in ("cupy-decode", "jax-decode")
]
WIDTHS = [80, 100, 200, None]  # None: piped, no COLUMNS


def _printed(argv: list[str], width: int | None, monkeypatch, capsys) -> str:
    if width is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", str(width))
    capsys.readouterr()
    main(argv)
    text = capsys.readouterr().out
    assert not re.search(r"\d…|…\d|\d\.…", text), "a number was cut"
    return text


def _json(argv: list[str], capsys) -> dict | list:
    capsys.readouterr()
    main([*argv, "--json", "-"])
    return json.loads(capsys.readouterr().out)


def _missing(text: str, values: list[str]) -> list[str]:
    """The values not found whole in text (not as part of a longer number)."""
    return [v for v in values if not re.search(rf"(?<![\d.]){re.escape(v)}(?![\d])", text)]


def _ms(v: float | None) -> list[str]:
    return [] if v is None else [f"{v:.3f}"]


def _pct(share: float | None) -> list[str]:
    return [] if share is None else [f"{100 * share:.1f}"]


def _analyze_numbers(doc: dict) -> list[str]:
    values = []
    for run in doc["runs"]:
        found = run["steps_found"]
        values += [str(found["steps"]), str(found["decode_steps"]), str(found["prefill_steps"])]
        values += [] if found["period_cv"] is None else [f"{found['period_cv']:.3f}"]
        values += _pct(found["gpu_coverage"]) + [str(run["steps"])]
        for part in ("forward", "sampling", "bubble", "kernel_gap", "period"):
            values += _ms(run[f"{part}_ms"]["median"])
        values += _pct(run["bubble_share"]) + _pct(run["host_late_share"])
        for split in ("time", "began"):
            values += [
                f"{ms:.3f}" for ms in run["attribution_ms_per_step"][split]["top_level"].values()
            ]
        for phase, ms in list(run["attribution_ms_per_step"]["time"]["phase"].items())[:8]:
            values += _ms(ms) + _ms(run["attribution_ms_per_step"]["began"]["phase"].get(phase))
        values += [f"{row['per_step']:.3g}" for row in run.get("syncs_per_step", [])]
        gain = run.get("pipelining", {})
        if "speedup_pct" in gain:
            values += [
                f"{gain['speedup_pct']:+.1f}%",
                *(f"{x:+.1f}%" for x in gain["interval_pct"]),
            ]
    return values


@pytest.mark.parametrize("width", WIDTHS)
def test_analyze_shows_every_number_whole(width, monkeypatch, capsys):
    doc = _json(["analyze", *FOREIGN], capsys)
    assert isinstance(doc, dict) and doc["schema"] == 1
    values = _analyze_numbers(doc)
    assert len(values) > 40
    text = _printed(["analyze", *FOREIGN], width, monkeypatch, capsys)
    assert _missing(text, values) == []
    for run in doc["runs"]:  # row labels are never lost
        assert run["name"] in text


def _pct_text(v: float | None) -> list[str]:
    return [] if v is None else [f"{v:+.1f}%"]


@pytest.mark.parametrize("width", WIDTHS)
def test_predict_blog_shows_every_number_whole(width, monkeypatch, capsys):
    rows = _json(["predict", "--blog"], capsys)
    assert isinstance(rows, list) and rows
    values = []
    for r in rows:
        values += [f"{r['blocking_ms']:.2f}", f"{r['pipelined_ms']:.2f}", f"{r['L']:.0f}"]
        values += [f"{100 * r['z']:.2f}%", f"{r['error_pts']:+.1f}"]
        for key in ("predicted_pct", "published_pct", "observed_pct"):
            values += _pct_text(r[key])
        values += [f"{r['predicted_lo']:.1f}", f"{r['predicted_hi']:.1f}"]
    text = _printed(["predict", "--blog"], width, monkeypatch, capsys)
    assert _missing(text, values) == []
    for r in rows:
        assert r["label"] in " ".join(text.split())  # a wrapped label: its words in order


@pytest.mark.parametrize("width", WIDTHS)
def test_run_shows_every_number_whole(width, monkeypatch, capsys):
    argv = ["run", "--model", "tiny-llama", "--streams", "2", "--output-len-mean", "4",
            "--output-len-dist", "fixed", "--max-model-len", "64"]  # fmt: skip
    if width is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", str(width))
    capsys.readouterr()
    main([*argv, "--json", "-"])
    out, err = capsys.readouterr()  # the JSON and, on stderr, the table of the same run
    assert not re.search(r"\d…|…\d", err)
    (run,) = json.loads(out)["runs"]
    s = run["summary"]
    values = [str(s["generated_tokens"]), f"{s['mean_generated_len']:.1f}",
              f"{s['tokens_per_s']:.1f}", f"{s['wall_s']:.2f}", f"{s['step_ms_median']:.3f}",
              f"{s['step_ms_p10']:.3f}", f"{s['step_ms_p90']:.3f}", str(s["decode_steps"]),
              f"{s['prefill_s']:.3f}", f"{s['decode_s']:.3f}"]  # fmt: skip
    for key in ("ttft_ms", "tpot_ms", "itl_ms"):
        values += [f"{run['latency'][key][k]:.2f}" for k in ("mean", "median", "p99")]
    assert _missing(err, values) == []


def _wide_table() -> Table:
    table = Table(title="wide")
    table.add_column("configuration")
    for i in range(12):
        table.add_column(f"column {i}", justify="right", no_wrap=True)
    table.add_row("a long configuration label", *(f"{1234.5678 * i:+.4f}%" for i in range(12)))
    return table


def test_a_table_too_wide_for_its_console_prints_as_records():
    table = _wide_table()
    assert fitted(table, 300) is table
    shown = fitted(_wide_table(), 80)
    assert not isinstance(shown, Table)
    from rich.console import Console

    console = Console(width=40, record=True, color_system=None)
    console.print(records(_wide_table()))
    text = console.export_text()
    assert "configuration: a long configuration label" in " ".join(text.split())
    for i in range(12):
        assert re.search(rf"column {i}: +{re.escape(f'{1234.5678 * i:+.4f}%')}", text)


@pytest.mark.parametrize("width", WIDTHS)
def test_analyze_kernels_shows_every_number_whole(width, monkeypatch, capsys):
    """The kernel view's tables too; a table wider than the terminal is not cropped (it shows as
    records: a terminal cuts the right side of a line without an ellipsis)."""
    argv = ["analyze", FOREIGN[0], "--kernels"]
    doc = _json(argv, capsys)
    assert isinstance(doc, dict)
    view = doc["runs"][0]["kernels"]
    values = [str(r["calls"]) for r in view["top_kernels"] + view["cuda_api"]]
    for rows, keys in (
        (view["top_kernels"], ("total_ms", "mean_us", "p50_us", "p90_us", "p99_us")),
        (view["cuda_api"], ("total_ms", "mean_us", "p50_us", "p99_us")),
        (view["run_split"], ("ms",)),
    ):
        values += [f"{r[k]:.3f}" for r in rows for k in keys]
    assert len(values) > 100
    text = _printed(argv, width, monkeypatch, capsys)
    assert _missing(text, values) == []
    assert width is None or max(len(line) for line in text.splitlines()) <= width


def test_run_summary_counts_read_as_words():
    """`run` said "(1 prefills)"; each count agrees with its noun."""
    from types import SimpleNamespace

    from bubblelab.cli.run import summary_table

    summary = dict(
        model="m", device="cpu", depth=2, streams=1, generated_tokens=3, mean_generated_len=3.0,
        tokens_per_s=1.0, wall_s=3.0, step_ms_median=1.0, step_ms_p10=1.0, step_ms_p90=1.0,
        decode_steps=1, prefill_s=0.1, decode_s=0.2, prefill_steps=1, handoff_probe_n=1,
        handoff_probe_ms=0.02, handoff_probe_iqr_ms=0.01, cuda_graphs=False,
    )  # fmt: skip
    console = Console(width=200, record=True)
    console.print(summary_table(SimpleNamespace(summary=summary, latency={})))
    text = console.export_text()
    assert "· 1 stream " in text and "over 1 step " in text
    assert "(1 prefill)" in text and "1 sample)" in text
    summary.update(streams=2, decode_steps=5, prefill_steps=2, handoff_probe_n=7)
    console.print(summary_table(SimpleNamespace(summary=summary, latency={})))
    text = console.export_text()
    assert "· 2 streams" in text and "over 5 steps" in text and "(2 prefills)" in text
