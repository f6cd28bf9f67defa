"""The CLI's edges (issue #28): paths and names are never rich markup, a damaged run record is named
and run again or skipped, a refusal comes before any progress line, and one sweep at a time writes a
run directory."""

from __future__ import annotations

import ctypes
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bubblelab.cli import main
from bubblelab.runs import worker
from bubblelab.runs.rundir import read_results
from bubblelab.runs.state import LOCK_FILE, finished_runs, read_state
from tests.cli_helpers import ROOT

TINY = ["--model", "tiny-llama", "--streams", "1,2", "--output-len-mean", "4"]
TINY += ["--requests-per-stream", "1", "--repeats", "1", "--max-model-len", "64", "--no-nsys"]
RUNS = {f"plain/s{s}-d{d}-r0" for s in (1, 2) for d in (1, 2)}


def cli(argv: list[str], capsys) -> tuple[int, str, str]:
    """main(argv) as a shell sees it: (exit status, stdout, stderr)."""
    try:
        main(argv)
        code = 0
    except SystemExit as e:
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(code: int, out: str, err: str) -> str:
    assert code == 2 and out == "", (code, out, err)
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("bubblelab: error: "), err
    assert "Traceback" not in err
    return lines[0]


def stop_after(monkeypatch, n: int) -> None:
    """Ctrl-C in the sweep's n+1-th run."""
    real, calls = worker.run_workload, []

    def run(*args, **kwargs):
        calls.append(1)
        if len(calls) > n:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(worker, "run_workload", run)


# -- markup ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["x[/bold]y", "[bold red]x[/]", ":smile: [link=file:///etc]z"])
def test_a_path_is_printed_as_typed_never_as_markup(tmp_path, capsys, monkeypatch, name):
    out = tmp_path / name
    stop_after(monkeypatch, 2)
    code, stdout, err = cli(["run-and-profile", *TINY, "--out", str(out)], capsys)
    assert code == 130 and err == "bubblelab: error: interrupted\n"
    assert f"2 finished runs kept in {out}: `bubblelab report {out}` reports them" in stdout
    monkeypatch.undo()
    code, stdout, _ = cli(["run-and-profile", "--resume", str(out)], capsys)
    assert code == 0
    assert f"2 runs already finished in {out}: running the rest" in stdout
    assert stdout.rstrip().endswith(f"report: {out / 'report.html'}")
    assert finished_runs(out) == RUNS and (out / "report.html").is_file()
    # where the time went, the report's part kept beside the passes' (runs/timings.json)
    parts = r"took (\d+) s: before the runs (\d+) s, runs (\d+) s, assembly (\d+) s, "
    parts += r"report and exports (\d+) s"
    took = re.search(parts, stdout)
    assert took and int(took[1]) >= max(int(t) for t in took.groups()[1:])
    assert {"report", "startup"} <= set(json.loads((out / "runs" / "timings.json").read_text()))


def test_resuming_a_finished_sweep_says_it_ran_nothing_and_counts_no_earlier_time(tmp_path, capsys):
    out = tmp_path / "run"
    assert cli(["run-and-profile", *TINY, "--out", str(out)], capsys)[0] == 0
    code, stdout, _ = cli(["run-and-profile", "--resume", str(out)], capsys)
    assert code == 0 and "nothing left to run" in stdout
    took = re.search(r"took \d+ s: .*", stdout)
    assert took and "before the runs" in took[0] and "report" in took[0]
    assert not re.search(r", runs \d+ s", took[0])  # the first call's, not this one's
    assert "assembly" not in took[0]


# -- damaged run records ---------------------------------------------------------------------------
def test_a_damaged_run_record_is_skipped_by_report_and_run_again_by_resume(tmp_path, capsys):
    out = tmp_path / "run"
    assert cli(["run-and-profile", *TINY, "--out", str(out)], capsys)[0] == 0
    record = out / "runs" / "plain" / "s1-d1-r0.json.gz"
    record.write_bytes(record.read_bytes()[:100])  # cut, as a full disk or a bad copy leaves it
    assert finished_runs(out) == RUNS - {"plain/s1-d1-r0"}

    code, stdout, err = cli(["report", str(out), "--n-boot", "20"], capsys)
    assert code == 0, err
    assert err.splitlines()[0] == f"skipped {record}: damaged (not a whole run record)"
    assert stdout.strip() == str(out / "report.html")
    assert sorted(read_results(out).runs["run_id"]) == [
        "s1-d2-r0-timeline", "s2-d1-r0-timeline", "s2-d2-r0-timeline"
    ]  # fmt: skip

    code, stdout, err = cli(["run-and-profile", "--resume", str(out)], capsys)
    assert code == 0, err
    assert f"{record} is damaged: running it again" in stdout
    assert finished_runs(out) == RUNS and read_state(out)["status"] == "complete"
    assert len(read_results(out).runs) == 4


@pytest.mark.parametrize("name", ["plan.json", "worker.json", "timings.json"])
def test_a_damaged_bookkeeping_file_is_one_line(tmp_path, capsys, name):
    out = tmp_path / "run"
    assert cli(["run-and-profile", *TINY, "--out", str(out)], capsys)[0] == 0
    damaged = out / "runs" / ("plain" if name != "timings.json" else "") / name
    damaged.write_text("{")
    (out / "results.json.gz").unlink()
    code, stdout, err = cli(["report", str(out), "--n-boot", "20"], capsys)
    if code:
        assert str(damaged) in one_line_error(code, stdout, err)
    else:  # what it only times is left out
        assert stdout.strip() == str(out / "report.html") and len(read_results(out).runs) == 4


# -- a refusal comes before anything is said -------------------------------------------------------
def test_nsys_forced_without_nsys_is_refused_before_any_progress(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.delenv("NSYS", raising=False)
    out = tmp_path / "run"
    line = one_line_error(*cli(["run-and-profile", *TINY, "--nsys", "--out", str(out)], capsys))
    assert "nsys (Nsight Systems) not found" in line
    assert not out.exists()


@pytest.mark.parametrize(
    ("model", "said"),
    [("llama-9000", "neither an existing path nor a known preset"), ("a/x.gguf", "does not exist")],
)
def test_an_unknown_model_is_refused_before_any_progress(tmp_path, capsys, model, said):
    out = tmp_path / "run"
    argv = ["run-and-profile", *TINY, "--model", model, "--out", str(out)]  # the last --model wins
    assert said in one_line_error(*cli(argv, capsys)) and not out.exists()


def test_keep_reports_reaches_the_sweep_and_goes_with_resume(tmp_path, capsys, monkeypatch):
    """--keep-reports keeps nsys's .nsys-rep files (runs.passes.finish); it says how to run the
    sweep, not what to measure, so --resume takes it too, where the sweep runs under nsys."""
    from bubblelab.core.errors import BubblelabError
    from bubblelab.runs import sweep

    asked: list[bool] = []

    def stand_in(spec, out, **kw):
        asked.append(kw["keep_reports"])
        raise BubblelabError("stopped by the test")

    monkeypatch.setattr(sweep, "run_sweep", stand_in)
    refused = cli(
        ["run-and-profile", *TINY, "--keep-reports", "--out", str(tmp_path / "x")], capsys
    )
    assert "--keep-reports keeps nsys's reports: leave out --no-nsys" in one_line_error(*refused)
    out, stopped = tmp_path / "run", (2, "bubblelab: error: stopped by the test\n")
    auto = [a for a in TINY if a != "--no-nsys"]  # nsys where found (the stand-in looks for none)
    for extra in ([], ["--keep-reports"]):
        code, _, err = cli(["run-and-profile", *auto, *extra, "--out", str(out)], capsys)
        assert (code, err) == stopped  # (the progress bar had started)
    assert asked == [False, True]
    monkeypatch.undo()
    stop_after(monkeypatch, 1)
    assert cli(["run-and-profile", *TINY, "--out", str(out)], capsys)[0] == 130
    monkeypatch.setattr(sweep, "run_sweep", stand_in)
    refused = cli(["run-and-profile", "--resume", str(out), "--keep-reports"], capsys)
    assert f"{out} ran without nsys" in one_line_error(*refused) and asked == [False, True]


def test_nsys_depths_narrow_the_profiled_pass_to_depths_that_run(tmp_path, capsys, monkeypatch):
    """--nsys-depths 1: the nsys pass profiles the blocking runs alone (runs.sweep.passes); a depth
    the sweep does not run is refused in one line before anything runs."""
    from bubblelab.core.errors import BubblelabError
    from bubblelab.runs import sweep

    specs = []

    def stand_in(spec, out, **kw):
        specs.append(spec)
        raise BubblelabError("stopped by the test")

    monkeypatch.setattr(sweep, "run_sweep", stand_in)
    cli(["run-and-profile", *TINY, "--nsys-depths", "1", "--out", str(tmp_path / "a")], capsys)
    (spec,) = specs
    assert spec.nsys_depths == [1]
    (_, profiled, _), (_, plain, _) = sweep.passes(spec, nsys=True)
    assert {r["depth"] for r in profiled} == {1} and {r["depth"] for r in plain} == {1, 2}
    refused = cli(["run-and-profile", *TINY, "--depth", "2", "--nsys-depths", "1", "--out",
                   str(tmp_path / "b")], capsys)  # fmt: skip
    assert "nsys_depths [1] must be among the depths run, [2]" in one_line_error(*refused)
    assert len(specs) == 1


@pytest.fixture
def readonly(tmp_path) -> Iterator[Path]:
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    yield folder
    folder.chmod(0o755)


def _without_root_file_access() -> None:
    """In the child, before exec: drop the capabilities that let root write anywhere
    (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH), so file modes hold for it as for any user."""
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (1, 2):
        if libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


PR_CAPBSET_DROP = 24


def as_a_user(*args: str) -> subprocess.CompletedProcess:
    """`bubblelab ARGS` in a fresh process that file modes bind (root too, as in a CI container)."""
    return subprocess.run(
        [sys.executable, "-m", "bubblelab", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "HOME": "/tmp", "COLUMNS": "120"},
        timeout=300,
        preexec_fn=_without_root_file_access if os.geteuid() == 0 else None,
    )


def test_an_out_folder_that_cannot_be_written_is_refused_first(readonly):
    for command in (["run-and-profile", *TINY], ["demo"]):
        done = as_a_user(*command, "--out", str(readonly / "run"))
        assert done.returncode == 2 and done.stdout == "", done.stderr
        assert done.stderr.splitlines() == [
            f"bubblelab: error: --out {readonly / 'run'}: {readonly} is not writable"
        ]


def test_a_file_system_refusal_no_check_foresaw_is_one_line(tmp_path, capsys, monkeypatch):
    """As root, /proc passes every access check and still cannot hold a folder."""

    def refused(*args, **kwargs):
        raise FileNotFoundError(2, "No such file or directory", "/proc/x")

    monkeypatch.setattr("bubblelab.runs.state.open_run_dir", refused)
    code, _, err = cli(["run-and-profile", *TINY, "--out", str(tmp_path / "x")], capsys)
    assert code == 2 and err == "bubblelab: error: /proc/x: No such file or directory\n"


def test_a_catalog_that_cannot_be_written_is_refused_before_the_analysis(readonly):
    trace = ROOT / "traces" / "nsys-h200-probe.sqlite"
    done = as_a_user("analyze", str(trace), "--catalog", str(readonly / "c.duckdb"))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f"bubblelab: error: --catalog {readonly / 'c.duckdb'}: {readonly} is not writable"
    ]


# -- one sweep at a time ---------------------------------------------------------------------------
HOLD = """
import sys, time
from pathlib import Path
from bubblelab.runs.state import lock_run_dir
with lock_run_dir(Path(sys.argv[1])):
    print("locked", flush=True)
    time.sleep(600)
"""


def test_two_sweeps_into_one_folder_the_second_is_told_who_holds_it(tmp_path, capsys):
    out = tmp_path / "run"
    assert cli(["run-and-profile", *TINY, "--out", str(out)], capsys)[0] == 0
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(out)], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    try:
        assert holder.stdout.readline() == "locked\n"
        for argv in ([*TINY, "--out", str(out)], [*TINY, "--force", "--out", str(out)],
                     ["--resume", str(out)]):  # fmt: skip
            line = one_line_error(*cli(["run-and-profile", *argv], capsys))
            assert line == (
                f"bubblelab: error: {out} is in use by another sweep (pid {holder.pid}): "
                "wait for it to end, or choose another --out"
            )
    finally:
        holder.kill()  # kill -9: the kernel drops the lock with the process
        holder.wait()
    assert cli(["run-and-profile", *TINY, "--force", "--out", str(out)], capsys)[0] == 0
    files = sorted(p.name for p in out.iterdir() if p.is_file() and p.name != LOCK_FILE)
    assert finished_runs(out) == RUNS and files == [
        "catalog.duckdb", "report.html", "results.json.gz", "status.json", "sweep.json"
    ]  # fmt: skip


@pytest.mark.parametrize("command", ["analyze", "report", "predict", "export"])
def test_a_folder_of_traces_is_told_to_name_them(tmp_path, capsys, command):
    for name in ("a.sqlite", "b.sqlite.gz"):
        (tmp_path / name).write_bytes(b"")
    with pytest.raises(SystemExit) as done:
        main([command, str(tmp_path)])
    assert done.value.code == 2
    said = capsys.readouterr().err
    assert f"{tmp_path} is not a run directory (no results.json); it holds 2 traces" in said
    assert f"name them (e.g. {tmp_path / 'a.sqlite'})" in said
    (tmp_path / "b.sqlite.gz").unlink()
    with pytest.raises(SystemExit):
        main([command, str(tmp_path)])
    assert f"it holds one trace: name it ({tmp_path / 'a.sqlite'})" in capsys.readouterr().err


def test_analyze_refuses_a_bad_stream_count_before_asking_for_what_it_needs(capsys):
    with pytest.raises(SystemExit):
        main(
            [
                "analyze",
                str(ROOT / "traces" / "foreign" / "cupy-decode.sqlite.gz"),
                "--streams",
                "0",
            ]
        )
    assert "--streams must be an integer in [1, 4096], got 0" in capsys.readouterr().err
