"""Long work survives interruption and nothing is ever lost (issue #14 item 2, #17 item 8): a sweep
keeps every finished run through Ctrl-C or a failure, refuses an existing run directory unless told
to resume or replace it, resumes only what is missing, and a report is written from what
finished."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bubblelab.cli import main
from bubblelab.core.errors import BubblelabError
from bubblelab.report.report import report_run_dir
from bubblelab.runs import worker
from bubblelab.runs.assemble import assemble, needs_assembly
from bubblelab.runs.demo import write_demo_run_dir
from bubblelab.runs.rundir import read_results, results_path
from bubblelab.runs.state import finished_runs, read_state
from bubblelab.runs.sweep import SweepSpec, run_sweep

TAGS = ["s1-d1-r0", "s1-d2-r0", "s2-d1-r0", "s2-d2-r0"]
RUNS = [f"plain/{tag}" for tag in TAGS]


def tiny(**options) -> SweepSpec:
    base = dict(
        model="tiny-llama",
        streams=[1, 2],
        output_len_mean=4,
        requests_per_stream=1,
        repeats=1,
        max_model_len=64,
    )
    return SweepSpec(**{**base, **options})


def sweep(spec: SweepSpec, out: Path, **kw) -> list[str]:
    ran: list[str] = []
    on_run = kw.pop("on_run", None)

    def record(tag: str, summary: dict) -> None:
        ran.append(tag)
        if on_run is not None:
            on_run(tag, summary)

    run_sweep(spec, out, use_nsys=False, on_run=record, say=lambda _: None, **kw)
    return ran


def snapshot(root: Path) -> dict[str, int]:
    return {str(p): p.stat().st_mtime_ns for p in root.rglob("*")}


def test_interrupt_keep_report_refuse_resume_force(tmp_path):
    out = tmp_path / "run"

    def ctrl_c_after_two(tag: str, _: dict) -> None:
        if tag == TAGS[1]:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        sweep(tiny(), out, on_run=ctrl_c_after_two)
    state = read_state(out)
    assert state is not None and state["status"] == "interrupted"
    assert finished_runs(out) == set(RUNS[:2]) and results_path(out) is None

    # `bubblelab report DIR` writes the report from what finished.
    assert needs_assembly(out)
    main(["report", str(out), "--n-boot", "20"])
    html = (out / "report.html").read_text()
    assert "s1-d2-r0-timeline" in html and "s2-d1-r0-timeline" not in html
    assert re.search(r"\b1 stream\b", html) and not re.search(r"\b2 streams", html)
    provenance = read_results(out).provenance
    assert provenance["finished_runs"] == RUNS[:2] and provenance["missing_runs"] == RUNS[2:]

    # An existing run directory is touched only with resume or force.
    before = snapshot(out)
    with pytest.raises(BubblelabError, match="already holds a run: --resume"):
        sweep(tiny(), out)
    with pytest.raises(BubblelabError, match=r"other options \(output_len_mean\)"):
        sweep(tiny(output_len_mean=5), out, resume=True)
    assert snapshot(out) == before

    assert sweep(tiny(), out, resume=True) == TAGS[2:]  # only what is missing
    assert read_state(out)["status"] == "complete"
    assert sorted(read_results(out).runs["run_id"]) == sorted(f"{t}-timeline" for t in TAGS)
    assert not needs_assembly(out)

    assert sweep(tiny(), out, force=True) == TAGS  # replaced whole
    assert read_state(out)["status"] == "complete"


def test_resuming_a_finished_sweep_runs_and_assembles_nothing(tmp_path):
    """A resumed sweep with nothing left to run once ingested every trace again (42 and 51 s for
    two finished TP-2 sweeps on the GPU machine): its catalog and results stay as they were."""
    out = tmp_path / "run"
    sweep(tiny(streams=[1]), out)
    derived = [p for p in out.iterdir() if p.name.startswith(("catalog", "results"))]
    assert derived
    before = {p.name: p.stat().st_mtime_ns for p in derived}
    said: list[str] = []
    run_sweep(tiny(streams=[1]), out, use_nsys=False, resume=True, say=said.append)
    assert {p.name: p.stat().st_mtime_ns for p in derived} == before
    assert any("nothing left to run" in line for line in said)
    assert read_state(out)["status"] == "complete"

    # Stale results (a run finished after them) are assembled again.
    results = results_path(out)
    assert results is not None
    results.unlink()
    run_sweep(tiny(streams=[1]), out, use_nsys=False, resume=True, say=lambda _: None)
    assert results_path(out) is not None and not needs_assembly(out)


def failing_after(monkeypatch, n: int) -> None:
    """The worker's n+1-th run dies (a profiler that dies, a worker killed)."""
    real = worker.run_workload
    calls = []

    def run(*args, **kwargs):
        calls.append(args)
        if len(calls) > n:
            raise BubblelabError("the profiler died")
        return real(*args, **kwargs)

    monkeypatch.setattr(worker, "run_workload", run)


def test_a_sweep_that_finishes_nothing_leaves_nothing(tmp_path, monkeypatch):
    failing_after(monkeypatch, 0)
    out = tmp_path / "run"
    with pytest.raises(BubblelabError, match="run plain/s1-d1-r0 failed: the profiler died"):
        sweep(tiny(), out)
    assert not out.exists()


def test_a_sweep_that_finishes_nothing_keeps_its_logs_and_names_them(tmp_path, monkeypatch):
    """What says why (nsys's output, a worker's log) outlives the removed folder, in one file the
    error names: a failed nsys pass once pointed at a log its own clean-up had removed."""
    out = tmp_path / "run"

    def run(*args, **kwargs):
        log = out / "runs" / "nsys" / "nsys.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("the profiled command was killed by SIGTERM\n")
        raise BubblelabError("nsys profile exited with 143")

    monkeypatch.setattr(worker, "run_workload", run)
    with pytest.raises(BubblelabError, match=r"exited with 143 \(its logs: (\S+)\)") as info:
        sweep(tiny(), out)
    assert not out.exists()
    kept = Path(re.search(r"its logs: (\S+)\)", str(info.value)).group(1))
    text = kept.read_text()
    kept.unlink()
    assert "==> runs/nsys/nsys.log <==" in text and "killed by SIGTERM" in text


def test_a_failure_midway_leaves_a_resumable_directory_that_says_what_failed(tmp_path, monkeypatch):
    failing_after(monkeypatch, 3)
    out = tmp_path / "run"
    with pytest.raises(
        BubblelabError, match=r"run plain/s2-d2-r0 failed: .* \(3 finished runs kept"
    ):
        sweep(tiny(), out)
    state = json.loads((out / "status.json").read_text())
    assert state["status"] == "failed"
    assert state["failed"] == {"run": "plain/s2-d2-r0", "error": "the profiler died"}
    assert finished_runs(out) == set(RUNS[:3])
    monkeypatch.undo()
    main(["run-and-profile", "--resume", str(out)])  # the CLI: the saved options, the rest
    assert read_state(out)["status"] == "complete"
    assert len(read_results(out).runs) == 4


def test_a_single_depth_sweep_reports(tmp_path):
    """`--depth 2` crashed in the report step after all the runs."""
    out = tmp_path / "d2"
    argv = ["run-and-profile", "--model", "tiny-llama", "--depth", "2", "--streams", "1"]
    argv += ["--output-len-mean", "4", "--requests-per-stream", "1", "--max-model-len", "64"]
    argv += ["--repeats", "1"]
    main([*argv, "--no-nsys", "--out", str(out)])
    html = (out / "report.html").read_text()
    assert "No configuration was measured at both depths" in html
    assert list(read_results(out).runs["depth"]) == [2]


def test_the_demo_never_replaces_measured_results(tmp_path):
    out = tmp_path / "run"
    sweep(tiny(streams=[1]), out)
    before = snapshot(out)
    with pytest.raises(BubblelabError, match="holds measured results"):
        write_demo_run_dir(out)
    assert snapshot(out) == before
    demo = tmp_path / "demo"
    write_demo_run_dir(demo, streams=(1,), requests_per_stream=2, output_len=8)
    write_demo_run_dir(demo, streams=(1,), requests_per_stream=2, output_len=8)  # over a demo
    assert read_results(demo).provenance["simulated"] is True
    report_run_dir(demo, n_boot=20)
    assert assemble.__doc__  # the report of a demo needs no assembly
    assert not needs_assembly(demo)


def test_the_progress_total_counts_only_the_runs_that_will_run(tmp_path):
    """Without nsys the sweep plans the unprofiled pass alone (the bar read 4/8 at the end)."""
    plans: list[tuple[int, int]] = []
    out = tmp_path / "run"

    def ctrl_c_after_one(tag: str, _: dict) -> None:
        if tag == TAGS[0]:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        sweep(tiny(), out, on_run=ctrl_c_after_one, on_plan=lambda *p: plans.append(p))
    sweep(tiny(), out, resume=True, on_plan=lambda *p: plans.append(p))
    assert plans == [(4, 0), (4, 1)]


def test_an_existing_run_is_refused_before_anything_is_said(tmp_path, capsys):
    out = tmp_path / "run"
    sweep(tiny(streams=[1]), out)
    capsys.readouterr()
    argv = ["run-and-profile", "--model", "tiny-llama", "--streams", "1", "--out", str(out)]
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    out_text, err = capsys.readouterr()
    assert out_text == "" and err.startswith(f"bubblelab: error: {out} already holds a run")


def test_an_interruption_while_assembling_is_recorded(tmp_path, monkeypatch):
    from bubblelab.runs import sweep as sweep_module

    def ctrl_c(out_dir):
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep_module, "assemble", ctrl_c)
    out = tmp_path / "run"
    said: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        run_sweep(tiny(), out, use_nsys=False, say=said.append)
    state = read_state(out)
    assert state["status"] == "interrupted" and state["failed"]["run"] is None
    assert said[-1].startswith("assembling the results: interrupted. 4 finished runs kept")
    monkeypatch.undo()
    main(["report", str(out), "--n-boot", "20"])  # the report assembles what finished
    assert len(read_results(out).runs) == 4


def test_force_replaces_the_old_reports_exports_too(tmp_path):
    out = tmp_path / "run"
    sweep(tiny(streams=[1]), out)
    main(["report", str(out), "--n-boot", "20"])
    stale = out / "export" / "trace.json.gz"
    assert stale.is_file()
    sweep(tiny(streams=[2]), out, force=True)
    assert not stale.exists()  # a trace of the old runs beside the new results
