"""kill -9 at many points of a sweep and of a report (issue #28), each the moment a file is about to
take its name (its bytes written, the rename not yet done, the worst time for a non-atomic writer):
afterwards `--resume` (or `--force` where the sweep had not begun) and `report` recover, without
losing a finished run and without a damaged file."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bubblelab.runs.rundir import read_results
from bubblelab.runs.state import damaged_runs, finished_runs, read_state
from tests.cli_helpers import ROOT

TINY = ["--model", "tiny-llama", "--streams", "1,2", "--output-len-mean", "4"]
TINY += ["--requests-per-stream", "1", "--repeats", "1", "--max-model-len", "64", "--no-nsys"]
RUNS = {f"plain/s{s}-d{d}-r0" for s in (1, 2) for d in (1, 2)}

# bubblelab, killed (SIGKILL) when a file named argv[1] is about to be renamed into place.
KILLED_AT = """
import os, signal, sys
real = os.replace
def replace(src, dst):
    if os.path.basename(dst) == sys.argv[1]:
        os.kill(os.getpid(), signal.SIGKILL)
    real(src, dst)
os.replace = replace
from bubblelab.cli import main
main(sys.argv[2:])
"""


def bubblelab(*args: str, killed_at: str | None = None) -> subprocess.CompletedProcess:
    code = (
        KILLED_AT if killed_at else "import sys; from bubblelab.cli import main; main(sys.argv[2:])"
    )
    return subprocess.run(
        [sys.executable, "-c", code, killed_at or "-", *args],
        capture_output=True, text=True, cwd=ROOT, timeout=600,
    )  # fmt: skip


def recorded(out: Path) -> dict[str, int]:
    """The finished runs' records, by mtime: a resume must keep them as they are."""
    return {r: (out / "runs" / f"{r}.json.gz").stat().st_mtime_ns for r in finished_runs(out)}


@pytest.mark.parametrize(
    "name", ["status.json", "s2-d1-r0.json.gz", "timings.json", "catalog.duckdb", "results.json.gz"]
)
def test_a_sweep_killed_anywhere_is_finished_by_resume(tmp_path, name):
    out = tmp_path / "run"
    killed = bubblelab("run-and-profile", *TINY, "--out", str(out), killed_at=name)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert damaged_runs(out) == []
    before = recorded(out)
    if read_state(out) is None:  # killed before the sweep had begun: nothing to keep
        assert before == {}
        again = bubblelab("run-and-profile", *TINY, "--force", "--out", str(out))
    else:
        again = bubblelab("run-and-profile", "--resume", str(out))
    assert again.returncode == 0, again.stderr
    assert finished_runs(out) == RUNS and read_state(out)["status"] == "complete"
    assert {r: t for r, t in recorded(out).items() if r in before} == before  # kept, not re-run
    assert len(read_results(out).runs) == 4 and (out / "report.html").is_file()


@pytest.mark.parametrize("name", ["results.json.gz", "report.html"])
def test_a_report_killed_anywhere_is_written_by_the_next(tmp_path, name):
    out = tmp_path / "run"
    assert bubblelab("run-and-profile", *TINY, "--out", str(out)).returncode == 0
    (out / "results.json.gz").unlink()  # the report assembles again
    (out / "report.html").unlink()
    killed = bubblelab("report", str(out), "--n-boot", "20", killed_at=name)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    for left in out.glob("*.json"):  # what is there is whole
        assert isinstance(json.loads(left.read_text()), dict)
    again = bubblelab("report", str(out), "--n-boot", "20")
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == str(out / "report.html")
    assert len(read_results(out).runs) == 4 and finished_runs(out) == RUNS
