"""`bubblelab analyze` of our own blocking runs says where their forecast is (our NVTX phases
forecast nothing): the command it names runs and gives the figure."""

from __future__ import annotations

import re

import pytest

from bubblelab.cli import main
from tests.cli_helpers import ROOT

TRACES = ROOT / "traces"
TINY = ["--model", "tiny-llama", "--streams", "1", "--output-len-mean", "24", "--no-nsys"]
TINY += ["--requests-per-stream", "1", "--repeats", "1", "--max-model-len", "64"]


def _said(argv: list[str], capsys) -> str:
    capsys.readouterr()
    main(argv)
    return " ".join(capsys.readouterr().out.split())  # rich's wrapping undone


def test_a_blocking_trace_is_told_the_command_that_forecasts_it(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("COLUMNS", "200")
    said = _said(["analyze", "traces/qwen3-0.6b-s1-d1.sqlite.gz"], capsys)
    command = "bubblelab analyze traces/qwen3-0.6b-s1-d1.sqlite.gz --domain none"
    assert "run qwen3-0.6b·s1·d1·r0 is blocking (depth 1)" in said and command in said
    forecast = _said(command.split()[1:], capsys)
    assert re.search(r"pipelining would buy \+\d+\.\d%", forecast), forecast[-400:]


def test_several_blocking_traces_get_one_line_and_a_pipelined_one_none(capsys):
    d1 = [str(TRACES / f"qwen3-0.6b-s{s}-d1.sqlite.gz") for s in (1, 32)]
    said = _said(["analyze", *d1, str(TRACES / "qwen3-0.6b-s1-d2.sqlite.gz")], capsys)
    assert said.count("blocking (depth 1)") == 1
    assert "runs qwen3-0.6b·s1·d1·r0, qwen3-0.6b·s32·d1·r0 are blocking" in said
    assert "TRACE --domain none" in said
    assert "blocking" not in _said(["analyze", str(TRACES / "qwen3-0.6b-s1-d2.sqlite.gz")], capsys)


@pytest.mark.slow
def test_a_run_directory_is_pointed_at_predict(tmp_path, capsys):
    out = tmp_path / "run"
    main(["run-and-profile", *TINY, "--out", str(out)])
    said = _said(["analyze", str(out)], capsys)
    assert f"beside what depth 2 measured: bubblelab predict {out}" in said
    assert "from depth 1 alone" in _said(["predict", str(out)], capsys)


@pytest.mark.slow
def test_a_sweep_of_depth_1_alone_is_told_what_would_forecast_it(tmp_path, capsys):
    out = tmp_path / "run"
    swept = _said(["run-and-profile", *TINY, "--depth", "1", "--out", str(out)], capsys)
    assert "(its runs are all at depth 1)" in swept  # the sweep's own summary says it too
    page = " ".join((out / "report.html").read_text().split())  # and its page
    assert page.count("Its runs are all at depth 1: run both") == 1
    assert "runs are all at depth 1: the forecast from depth 1 is set beside" in page
    assert "bubblelab predict" not in _said(["analyze", str(out)], capsys)
    with pytest.raises(SystemExit) as done:
        main(["predict", str(out)])
    said = " ".join(capsys.readouterr().err.split())
    assert done.value.code == 2 and "(its runs are all at depth 1)" in said
    assert "run-and-profile --depth 1,2" in said and "analyze TRACE --domain none" in said
