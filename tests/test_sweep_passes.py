"""A sweep's passes (issue #25 item 6): nsys profiles first with the options the analysis needs, the
unprofiled worker starts while nsys finishes and times nothing until it has, and the nsys pass
leaves gzipped SQLite exports only."""

from __future__ import annotations

import gzip
import json
import sqlite3
import subprocess
import sys
import threading
import time

import pytest

from bubblelab.profiling import nsys
from bubblelab.runs import passes
from bubblelab.runs.assemble import nsys_reports
from bubblelab.runs.record import find_record
from bubblelab.runs.sweep import SweepSpec
from bubblelab.runs.sweep import passes as sweep_passes

# Stands in for nsys: runs the command it profiles (the real worker, on the CPU), takes 2 s more to
# "write its reports" after it exits, and leaves a report per run in the plan, all exported but the
# last (the real nsys leaves that to `nsys export`, run here by finish_ranges).
FAKE_NSYS = f"""#!{sys.executable}
import json, pathlib, sqlite3, subprocess, sys, time
def export(path, origin):  # an SQLite file, as nsys exports, saying where it came from
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE origin (text TEXT)")
    db.execute("INSERT INTO origin VALUES (?)", (origin,))
    db.commit()
    db.close()
args = sys.argv[1:]
calls = pathlib.Path(__file__).with_name("calls.jsonl")
with calls.open("a") as f:
    f.write(json.dumps(args) + "\\n")
if args[0] == "export":
    export(args[args.index("--output") + 1], "export of " + args[-1])
    sys.exit(0)
out = pathlib.Path(args[args.index("-o") + 1])
app = args[args.index("--force-overwrite") + 2:]
done = subprocess.run(app)
time.sleep(2.0)
runs = len(json.loads(pathlib.Path(app[-1]).read_text())["runs"])
for n in range(1, runs + 1):
    out.with_name(f"{{out.name}}.{{n}}.nsys-rep").write_text("report" * 1000)
    if n < runs:
        export(out.with_name(f"{{out.name}}.{{n}}.sqlite"), f"sqlite {{n}}")
sys.exit(done.returncode)
"""


@pytest.fixture
def fake_nsys(tmp_path, monkeypatch):
    fake = tmp_path / "bin" / "nsys"
    fake.parent.mkdir()
    fake.write_text(FAKE_NSYS)
    fake.chmod(0o755)
    monkeypatch.setenv("NSYS", str(fake))
    return fake


def calls(fake) -> list[list[str]]:
    return [json.loads(line) for line in fake.with_name("calls.jsonl").read_text().splitlines()]


def origin(packed, tmp_path) -> str:
    """What the stand-in wrote into a gzipped export."""
    plain = tmp_path / "unpacked.sqlite"
    plain.write_bytes(gzip.decompress(packed.read_bytes()))
    db = sqlite3.connect(plain)
    (text,) = db.execute("SELECT text FROM origin").fetchone()
    db.close()
    return text


def spec() -> SweepSpec:
    return SweepSpec(model="tiny-llama", streams=[2], output_len_mean=4, requests_per_stream=2,
                     prompt_len=4, repeats=1)  # fmt: skip


def plan(s: SweepSpec, out, name: str, profiled: bool) -> dict:
    return dict(engine=s.engine(), runs=s.runs(), out_dir=str(out / "runs" / name),
                profile=profiled)  # fmt: skip


def test_nsys_runs_first_then_the_unprofiled_pass():
    assert [name for name, _, _ in sweep_passes(spec(), True)] == ["nsys", "plain"]
    assert [name for name, _, _ in sweep_passes(spec(), False)] == ["plain"]


@pytest.mark.parametrize("keep_reports", [False, True])
def test_the_unprofiled_pass_overlaps_nsys_wrap_up_but_times_nothing_in_it(
    fake_nsys, tmp_path, keep_reports
):
    s, out = spec(), tmp_path / "sweep"
    seen: list[str] = []
    first = passes.launch("nsys", plan(s, out, "nsys", True), out, ["s2-d1-r0", "s2-d2-r0"], None)
    second = passes.launch("plain", plan(s, out, "plain", False), out, ["s2-d1-r0", "s2-d2-r0"],
                           after=first)  # fmt: skip
    timed_nsys = passes.finish(first, lambda tag, summary: seen.append(f"nsys/{tag}"), keep_reports)
    ended = (first.run_dir / passes.ENDED).stat().st_mtime
    timed_plain = passes.finish(second, lambda tag, summary: seen.append(f"plain/{tag}"))
    assert seen == ["nsys/s2-d1-r0", "nsys/s2-d2-r0", "plain/s2-d1-r0", "plain/s2-d2-r0"]

    # nsys was asked for what the analysis reads, one report per capture range.
    (profile,) = [c for c in calls(fake_nsys) if c[0] == "profile"]
    options = profile[: profile.index("-o")]
    for option in ("cuda,nvtx", "--capture-range=cudaProfilerApi", "--capture-range-end=repeat",
                   "--cuda-graph-trace=node", "--cpuctxsw=none", "sqlite"):  # fmt: skip
        assert option in options, option
    assert options[options.index("-s") + 1] == "none"  # no CPU sampling
    assert [c[0] for c in calls(fake_nsys)] == ["profile", "export"]  # the one left unexported

    # The plain worker started before nsys had finished, and timed its first run after.
    worker = json.loads((second.run_dir / "worker.json").read_text())
    assert worker["started_unix"] < ended <= worker["runs_started_unix"]
    assert worker["wait_gpu_s"] > 0 and worker["wait_timing_s"] >= 0

    # What nsys left: gzipped exports, in run order; the .nsys-rep only when asked for.
    traces = out / "traces"
    kept = sorted(p.name for p in traces.iterdir())
    gz = ["run.1.sqlite.gz", "run.2.sqlite.gz"]
    reps = ["run.1.nsys-rep", "run.2.nsys-rep"]
    assert kept == sorted(gz + (reps if keep_reports else []))
    assert [p.name for p in nsys_reports(out)] == gz
    assert origin(traces / "run.1.sqlite.gz", tmp_path) == "sqlite 1"
    assert origin(traces / "run.2.sqlite.gz", tmp_path).startswith("export of ")

    # Every part timed.
    for key in ("wall_s", "start_s", "finish_s", "compress_s"):
        assert timed_nsys[key] >= 0, key
    assert timed_nsys["finish_s"] >= 2.0  # the stand-in's wrap-up
    assert timed_nsys["reports_bytes"] == 2 * 6000 and timed_nsys["traces_bytes"] > 0
    assert set(timed_plain) >= {"wall_s", "start_s", "finish_s"}


def test_a_failed_pass_says_why_from_its_log(tmp_path):
    s, out = spec(), tmp_path / "sweep"
    bad = plan(s, out, "plain", False)
    bad["engine"] = {**bad["engine"], "model": "no-such-model"}
    p = passes.launch("plain", bad, out, ["s2-d1-r0"], None)
    with pytest.raises(Exception, match="the sweep's worker failed: .*no-such-model"):
        passes.finish(p, None)


def test_stop_ends_a_pass_still_waiting_at_its_gate(tmp_path):
    s, out = spec(), tmp_path / "sweep"
    gate = passes.Pass("never", tmp_path / "never", [])  # a previous pass that never ends
    waiting = passes.launch("plain", plan(s, out, "plain", False), out, ["s2-d1-r0"], after=gate)
    time.sleep(0.5)
    assert waiting.proc is not None and waiting.proc.poll() is None
    passes.stop([waiting])
    assert waiting.proc.poll() is not None
    assert find_record(out / "runs" / "plain", "s2-d1-r0") is None


def test_profile_ranges_still_profiles_in_one_call(fake_nsys, tmp_path):
    """profile_ranges = start_ranges + finish_ranges (tools call it whole)."""
    s, out = spec(), tmp_path / "sweep"
    p = plan(s, out, "nsys", True)
    path = out / "runs" / "nsys" / "plan.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(p))
    argv = [sys.executable, "-m", "bubblelab.runs.worker", str(path)]
    exports = nsys.profile_ranges(out / "traces" / "run", argv)
    assert [e.name for e in exports] == ["run.1.sqlite", "run.2.sqlite"]


def test_the_gpu_gate_waits_for_the_previous_worker_to_be_gone(tmp_path):
    """Its worker.json is written before its process exits with the model still in GPU memory: the
    next worker sizes its KV pool from free memory, so it waits for the process too."""
    from bubblelab.runs.worker import wait_for_exit

    previous = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.5)"])
    gate = tmp_path / "worker.json"
    gate.write_text(json.dumps({"pid": previous.pid}))
    reaper = threading.Thread(target=previous.wait)  # as nsys reaps the worker it started
    reaper.start()
    waited = wait_for_exit(str(gate))
    reaper.join()
    assert 1.0 < waited < 10 and previous.returncode == 0
    assert wait_for_exit(None) < 0.1


def test_a_sweep_says_which_runs_met_something_in_their_timed_region(tmp_path, monkeypatch):
    from bubblelab.runs import driver
    from bubblelab.runs.rundir import read_results
    from bubblelab.runs.sweep import run_sweep

    monkeypatch.setattr(driver, "flags", lambda summary: ["compiled (1)"])
    said: list[str] = []
    run_sweep(spec(), tmp_path / "sweep", use_nsys=False, say=said.append)
    (line,) = [s for s in said if "timed region" in s]
    assert line.startswith("2 runs met something in their timed region: plain/s2-d1-r0: compiled")
    results = read_results(tmp_path / "sweep")
    assert (results.runs["timing_flags"] == "compiled (1)").all()
    assert results.runs["compiles_in_run"].eq(0).all() and results.runs["gc_in_run"].eq(0).all()
    timings = results.provenance["timings"]
    assert timings["passes"]["wall_s"] >= timings["plain"]["wall_s"] > 0


def test_a_pass_captured_whole_off_one_gpu_is_refused(tmp_path):
    """One capture range for the pass is for a profiled pass on one GPU
    (profiling.nsys.capture_mode): on the CPU the worker refuses the plan before it loads the
    model, in words."""
    from bubblelab.core.errors import BubblelabError
    from bubblelab.runs.worker import run_plan

    refused = {**plan(spec(), tmp_path, "nsys", profiled=True), "capture": "pass"}
    with pytest.raises(BubblelabError, match="captured whole is profiled, on one GPU"):
        run_plan(refused)
    assert find_record(tmp_path / "runs" / "nsys", "s2-d1-r0") is None
