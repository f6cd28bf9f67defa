"""Where a sweep's seconds go (issue #16 item 5): every part timed, and no work done twice."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bubblelab.cli import sweep as cli_sweep
from bubblelab.costmodel import predict
from bubblelab.profiling import nsys
from bubblelab.report import report
from bubblelab.runs.rundir import read_results
from bubblelab.runs.sweep import SweepSpec, run_sweep
from tools.docs import sweep_time


def tiny_spec(**options) -> SweepSpec:
    return SweepSpec(model="tiny-llama", streams=[1, 3], output_len_mean=6, requests_per_stream=2,
                     prompt_len=8, repeats=1, **options)  # fmt: skip


def test_a_sweep_records_where_its_seconds_went(tmp_path):
    run_sweep(tiny_spec(), tmp_path, use_nsys=False)
    timings = read_results(tmp_path).provenance["timings"]
    plain = timings["plain"]
    # Model load apart from the engine (compile, graph capture), which one worker does once.
    assert plain["load_s"] > 0 and plain["engine_s"] > 0
    assert plain["load_s"] + plain["engine_s"] == pytest.approx(plain["setup_s"])
    # Per run: warm-up, the profiler's range, the workload and writing the record add up to it.
    assert set(plain["run_parts_s"]) == set(plain["runs_s"])
    for tag, parts in plain["run_parts_s"].items():
        assert set(parts) == {"warmup", "profiler", "workload", "record"}
        assert all(v >= 0 for v in parts.values()), parts
        assert sum(parts.values()) == pytest.approx(plain["runs_s"][tag])
    # The parts outside the worker's own work, and the assembly after the passes.
    assert 0 <= plain["start_s"] < plain["wall_s"] and 0 <= plain["finish_s"] < plain["wall_s"]
    assert plain["ingest_s"] > 0 and timings["assemble"]["wall_s"] >= plain["ingest_s"]
    # What torch.compile did in the worker (counts), and no graph capture on the CPU.
    assert all(isinstance(n, int) and n >= 0 for n in plain["compile_counters"].values())
    assert plain["engine_parts_s"] == {}
    assert plain["import_ahead_s"] >= 0  # nothing to import ahead on the CPU, still timed


def test_the_breakdown_splits_compile_from_capture():
    """A GPU worker's set-up, split as engine.cuda_graphs timed it, and its compile caches' hits."""
    timings = {"wall_s": 40.0, "load_s": 0.5, "engine_s": 14.0, "runs_s": {},
               "engine_parts_s": {"sampler_warmup_s": 1.0, "warmup_s": 10.0, "capture_s": 2.5,
                                  "replay_s": 0.5}}  # fmt: skip
    rows = dict(sweep_time.pass_parts(timings, {}))
    assert rows["compile + graph capture"] == 14.0
    assert rows["of which: every shape's warm-up (torch.compile)"] == 10.0
    assert rows["of which: graph capture"] == 2.5
    assert (
        rows["of which: the sampler's compile"] + rows["of which: each graph's first replay"] == 1.5
    )


FAKE_NSYS = f"""#!{sys.executable}
import pathlib, sys
args = sys.argv[1:]
with open(pathlib.Path(__file__).with_name("calls"), "a") as calls:
    calls.write(args[0] + "\\n")
if args == ["--version"]:
    print("NVIDIA Nsight Systems version 2025.3.1.90-253135822126v0")
elif args[0] == "export":
    pathlib.Path(args[args.index("--output") + 1]).write_text("exported later")
else:
    out = pathlib.Path(args[args.index("-o") + 1])
    print("Collecting data...")
    for n in (1, 2):
        print(f"[worker 1.000] run r{{n}} ends", flush=True)
        out.with_name(f"{{out.name}}.{{n}}.nsys-rep").write_text("report")
        print(f"Generated: {{out.name}}.{{n}}.nsys-rep")
    out.with_name(f"{{out.name}}.1.sqlite").write_text("export")
"""


@pytest.fixture
def fake_nsys(tmp_path, monkeypatch):
    fake = tmp_path / "nsys"
    fake.write_text(FAKE_NSYS)
    fake.chmod(0o755)
    monkeypatch.setenv("NSYS", str(fake))
    nsys._version_of.cache_clear()
    yield fake
    nsys._version_of.cache_clear()


def test_nsys_is_asked_its_version_once(fake_nsys):
    """A sweep's assembly stamps every profiled run with nsys's version: one `nsys --version`
    for all of them, not one nsys start-up per run."""
    assert {nsys.nsys_version() for _ in range(6)} == {"2025.3.1.90"}
    assert fake_nsys.with_name("calls").read_text().split() == ["--version"]


def test_the_nsys_log_keeps_nsys_output_beside_the_runs(fake_nsys, tmp_path):
    log = tmp_path / "nsys.log"
    exports = nsys.profile_ranges(tmp_path / "traces" / "run", ["python", "-m", "x"], log=log)
    assert [p.name for p in exports] == ["run.1.sqlite", "run.2.sqlite"]
    lines = log.read_text().splitlines()
    # When nsys wrote each report, against the worker's own lines; what was exported afterwards.
    assert lines[1:5] == [
        "[worker 1.000] run r1 ends", "Generated: run.1.nsys-rep",
        "[worker 1.000] run r2 ends", "Generated: run.2.nsys-rep",
    ]  # fmt: skip
    assert "nsys exited; exported here: run.2.sqlite" in lines[-1]


def test_run_and_profile_bootstraps_its_predictions_once(tmp_path, monkeypatch):
    """The page and the console show the same prediction table: made once (its bootstrap is the
    slowest part of the page)."""
    calls = []

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    original = predict.predict_runs
    monkeypatch.setattr(predict, "predict_runs", counted)
    monkeypatch.setattr(report, "predict_runs", counted)
    page = cli_sweep.profile_and_report(tiny_spec(), tmp_path / "sweep", nsys=False)
    assert page.is_file() and "Predicted" in page.read_text() and len(calls) == 1


DEV = Path(__file__).parents[1] / "docs" / "measurements" / "2026-11-23" / "costmodel-dev"


@pytest.mark.skipif(not DEV.is_dir(), reason="the 2026-11-23 sweeps are not in this checkout")
def test_the_h200_sweeps_time_as_docs_h200_costmodel_says():
    """docs/h200-costmodel.md's breakdown of qwen3-4b's sweep, from what that sweep recorded."""
    text = sweep_time.markdown(DEV / "dev-qwen3-4b.results.json.gz")
    plain, profiled = text.split("nsys pass:")
    assert "| load + compile + graph capture | 25.9 |" in plain
    assert "| 30 runs: the workloads | 58.1 |" in plain and "| pass wall clock | 96.0 |" in plain
    assert "| 6 runs: the workloads | 13.1 |" in profiled
    assert "| runs: around the workload (warm-up, profiler range, record) | 27.6 |" in profiled
    assert "| outside the worker (start-up, and nsys's wrap-up) | 24.7 |" in profiled


def test_a_new_sweeps_time_is_told_part_by_part(tmp_path):
    run_sweep(tiny_spec(), tmp_path, use_nsys=False)
    text = sweep_time.markdown(tmp_path)
    parts = ("process start", "model load", "compile + graph capture", "runs: warm-up",
             "opening and closing the profiler range", "after the worker", "assembly")  # fmt: skip
    for part in parts:
        assert part in text, part
