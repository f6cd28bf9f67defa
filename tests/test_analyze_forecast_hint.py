"""`bubblelab analyze` of our own blocking runs says where their forecast is (our NVTX phases
forecast nothing): the command it names runs and gives the figure."""

from __future__ import annotations

import json
import math
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
def test_a_sweep_of_depth_1_alone_gets_its_forecast_said_unchecked(tmp_path, capsys):
    out = tmp_path / "run"
    swept = _said(["run-and-profile", *TINY, "--depth", "1", "--out", str(out)], capsys)
    assert "forecast from the depth-1 runs alone (not yet checked)" in swept
    assert "nothing has checked it yet; run-and-profile --depth 1,2" in swept
    page = " ".join((out / "report.html").read_text().split())  # and its page
    assert page.count("not yet checked: no depth-2 run was measured") == 1  # one configuration
    assert "Every run here is at depth 1, so each figure is a forecast" in page
    assert f"from them alone: bubblelab predict {out}" in _said(["analyze", str(out)], capsys)
    said = _said(["predict", str(out)], capsys)
    assert "not yet checked" in said and "run-and-profile --depth 1,2" in said
    main(["predict", str(out), "--json", "-"])
    (row,) = json.loads(capsys.readouterr().out)
    assert row["repeats"] == 1 and math.isfinite(row["wall_d1_predicted_pct"])
    assert f"{row['wall_d1_predicted_pct']:+.1f}%" in said and "observed_pct" not in row
