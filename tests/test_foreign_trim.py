"""Trimming traces to a window of steps (profiling/trim.py), and what
tools/traces/make_foreign_traces.py does with a GPU machine's exports, on CPU: its dry run, and its
trim, gzip and analysis of a trace."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bubblelab.profiling import analysis
from bubblelab.profiling.catalog import connect
from bubblelab.profiling.ingest import ingest, ingest_trace
from bubblelab.profiling.steps import StepOptions
from bubblelab.profiling.trim import trim, trim_foreign
from testing.synthetic_engines import Engine, engine_trace
from testing.synthetic_trace import MAIN, TraceBuilder

ROOT = Path(__file__).parents[1]
PROBE = ROOT / "traces" / "nsys-h200-probe.sqlite"
TOOL = ["-m", "tools.traces.make_foreign_traces"]  # as documented, from the checkout's root
COLUMNS = ["kind", "forward_ms", "busy_ms", "bubble_ms", "kernel_gap_ms", "period_ms", "wait_ms"]


def steps_of(trace: Path, **kw):
    con = connect(None)
    return analysis.per_step(con, ingest(trace, None, {}, con=con, **kw))


@pytest.mark.parametrize("options", [StepOptions(), StepOptions(step_range="^LLMEngine")])
def test_trimmed_foreign_trace_keeps_its_steps_exactly(tmp_path, options):
    b = TraceBuilder()
    engine_trace(b, Engine(steps=20, extra_syncs=3, step_range="LLMEngine.step"))
    full = b.write(tmp_path / "full.sqlite", our_domain=False)
    cut = trim_foreign(full, tmp_path / "cut.sqlite", 5, 14, options)
    before, after = steps_of(full, steps=options), steps_of(cut, steps=options)
    assert len(after) == 10
    want = before[before.step.between(5, 14)].reset_index(drop=True)
    got = after.reset_index(drop=True)
    # the last step of the window has no next step in the cut trace: no period there
    for column in COLUMNS:
        assert got[column][:-1].tolist() == pytest.approx(want[column][:-1].tolist(), nan_ok=True)
    assert got.gpu_start_ns.tolist() == want.gpu_start_ns.tolist()


def test_a_two_process_trace_is_cut_by_its_busier_rank_keeping_both(tmp_path):
    # nano-vllm at TP 2: one process a GPU, traced whole; the cut keeps both ranks' rows of the
    # window of the busier rank's steps (the ranks step together)
    b = TraceBuilder()
    engine_trace(b, Engine(steps=20, extra_syncs=1))
    engine_trace(b, Engine(steps=20, tid=MAIN + (1 << 24), device=1, t0=0.3))
    full = b.write(tmp_path / "tp.sqlite", our_domain=False)
    cut = trim_foreign(full, tmp_path / "cut.sqlite", 5, 14)
    con = connect(None)
    before = [analysis.per_step(con, r) for r in ingest_trace(full, None, {}, con=con)]
    after = [analysis.per_step(con, r) for r in ingest_trace(cut, None, {}, con=con)]
    assert len(after) == 2
    for whole, part in zip(before, after, strict=True):
        assert 9 <= len(part) <= 11  # the other rank's window edges may fall a step either way
        kept = whole[whole.gpu_start_ns.isin(part.gpu_start_ns)]
        assert kept.forward_ms.tolist()[1:-1] == pytest.approx(
            part.set_index("gpu_start_ns").loc[kept.gpu_start_ns, "forward_ms"].tolist()[1:-1]
        )


def test_trimmed_probe_by_its_own_ranges(tmp_path):
    cut = trim(PROBE, tmp_path / "probe.sqlite", 10, 19, domain="probe", slack_ns=0)
    con = connect(None)
    steps = analysis.per_step(con, ingest(cut, None, {}, domain="probe", con=con))
    assert len(steps) > 0 and cut.stat().st_size < PROBE.stat().st_size


def _tool():
    from tools.traces import make_foreign_traces

    return make_foreign_traces


def test_dry_run_checks_the_setup_and_trims_the_probe(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            *TOOL,
            "--out",
            str(tmp_path),
            "--dry-run",
            "--work",
            str(tmp_path / "w"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    files = sorted(p.name for p in (tmp_path / "foreign").iterdir())
    assert files == ["index.json", "summary.json"]  # a dry run writes no traces
    checks = json.loads((tmp_path / "foreign" / "summary.json").read_text())["dry_run"]
    assert checks["jobs"] == ["ckpt", "nano", "fork", "jax", "hf", "cupy"]
    assert "--cuda-graph-trace=node" in checks["nsys command"] and "osrt" in checks["nsys command"]
    assert (
        checks["probe"]["analysis"]["steps"] == 20 and checks["probe"]["analysis"]["rule"] == "sync"
    )


def test_finishing_a_trace_cuts_gzips_and_analyses_it(tmp_path):
    """What the tool does after nsys: the nano-vllm capture's raw half (before the idle between its
    two generates) and its NVTX half become two small traces, each with its analysis and index
    entry."""
    from tools.traces import foreign_finish as finish

    tool = _tool()
    b = TraceBuilder()
    engine_trace(b, Engine(steps=12))
    engine_trace(b, Engine(steps=12, step_range="LLMEngine.step", t0=400_000))  # 0.38 s later
    work, out = tmp_path / "work", tmp_path / "out"
    work.mkdir()
    out.mkdir()
    b.write(work / "nano.sqlite", our_domain=False)
    job = tool.Job(
        "nano",
        1,
        "nano-vllm",
        ["nanovllm-raw", "nanovllm-nvtx"],
        job={"ckpt": str(work / "ckpt-qwen3-4b"), "source": str(tmp_path)},
    )
    info = {"runs": {"raw": {"wall_s": 0.5, "generated_tokens": 8192}}, "mean_generated_len": 64}
    raw_entry, raw = tool.finish("nanovllm-raw", job, info, work, out, keep=300)
    nvtx_entry, nvtx = tool.finish("nanovllm-nvtx", job, info, work, out, keep=300)
    assert (raw_entry["steps"], nvtx_entry["steps"]) == ([0, 11], [0, 11])
    assert raw["steps_found"]["rule"] == "sync" and raw["steps_found"]["steps"] == 12
    assert nvtx["steps_found"]["rule"] == "nvtx" and nvtx_entry["step_range"] == finish.STEP_RANGE
    assert raw_entry["model"] == "qwen3-4b (seeded random weights)"
    assert raw["pipelining"]["output_len"] == 64 and raw["pipelining"]["speedup_pct"] > 0
    assert sorted(p.name for p in out.iterdir()) == [
        "nanovllm-nvtx.sqlite.gz",
        "nanovllm-raw.sqlite.gz",
    ]


def test_every_job_has_a_worker_and_the_workload_is_the_write_ups(tmp_path):
    tool = _tool()
    from tools.traces import foreign_engines as engines

    args = tool.argparse.Namespace(
        nano_vllm=tmp_path,
        fa_shim=tmp_path,
        fork_site=None,
        nano_preset="qwen3-4b",
        fork_preset="qwen3-0.6b",
    )
    jobs = tool.jobs(args, tmp_path)
    assert {j.name for j in jobs} == set(engines.WORKERS)
    # traces + index.json + summary.json come back; the opt-in jobs run when --only names them
    assert sum(len(j.traces) for j in jobs if not j.opt_in) + 2 <= 8
    assert [j.name for j in jobs if j.opt_in] == ["nano-tp2", "graphs", "compiled"]
    prompts = engines._prompts(2, 1000)
    assert len(prompts) == 128 and {len(p) for p in prompts} <= set(range(20, 81))
    assert engines.StubTokenizer.from_pretrained("x").decode([1, 2]) == ""


def test_hf_worker_runs_on_cpu(tmp_path):
    """The transformers worker end to end on a tiny preset, in its own process as on the GPU machine
    (there: qwen3-0.6b on CUDA, under nsys; it disables torch.compile for its whole process)."""
    info = tmp_path / "hf.info.json"
    job = json.dumps({"preset": "tiny-qwen3", "device": "cpu", "info": str(info)})
    result = subprocess.run(
        [sys.executable, "-m", _tool().ENGINES, "hf", job],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    found = json.loads(info.read_text())
    assert found["runs"]["raw"]["generated_tokens"] == 4 * 64 and found["requests"] == 4


FAKE_NSYS = """#!{python}
# Stands in for nsys: writes a synthetic foreign trace where nsys would write its export, and the
# worker's info file, instead of running the worker.
import json, sys
sys.path.insert(0, {root!r})  # testing/ is the checkout's, not installed
from testing.synthetic_engines import Engine, engine_trace
from testing.synthetic_trace import MAIN, TraceBuilder
args = sys.argv[1:]
base = args[args.index("-o") + 1]
job = json.loads(args[-1])
b = TraceBuilder()
engine_trace(b, Engine(steps=12, extra_syncs=16 if "fork" in base else 0))
if base.endswith("nano"):
    engine_trace(b, Engine(steps=12, step_range="LLMEngine.step", t0=400_000))
b.write(base + ".sqlite", our_domain=False)
info = {{"runs": {{"raw": {{"wall_s": 0.5, "generated_tokens": 8192}}}}, "mean_generated_len": 64}}
open(job["info"], "w").write(json.dumps(info))
"""


def test_the_tool_end_to_end_with_a_stand_in_for_nsys(tmp_path):
    """Every job of the tool run (ckpt skipped) with a fake nsys that writes synthetic traces: the
    files that come back, the index, the summary and one trace's analysis."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "nsys"
    fake.write_text(FAKE_NSYS.format(python=sys.executable, root=str(ROOT)))
    fake.chmod(0o755)
    out = tmp_path / "out"
    env = {**__import__("os").environ, "NSYS": str(fake)}
    result = subprocess.run(
        [sys.executable, *TOOL, "--out", str(out), "--only", "nano,fork,jax,hf,cupy",
         "--work", str(tmp_path / "work"), "--budget-s", "300"],
        capture_output=True, text=True, cwd=ROOT, timeout=600, env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert len(files) <= 8 and all(f.count("/") <= 1 for f in files)
    summary = json.loads((out / "foreign" / "summary.json").read_text())
    assert summary["jobs"]["ckpt"]["status"] == "failed"  # its worker needs a GPU here
    assert {k: v["status"] for k, v in summary["jobs"].items() if k != "ckpt"} == dict.fromkeys(
        ["nano", "fork", "jax", "hf", "cupy"], "ok"
    )
    index = json.loads((out / "foreign" / "index.json").read_text())
    assert set(index) == {
        f"{t}.sqlite.gz"
        for t in ("nanovllm-raw", "nanovllm-nvtx", "nano-vllm-fork", "jax-decode", "hf-generate")
    } | {"cupy-decode.sqlite.gz"}
    assert index["nanovllm-nvtx.sqlite.gz"]["step_range"] == r"^LLMEngine\.step$"
    fork = summary["traces"]["nano-vllm-fork"]
    assert fork["steps_found"]["rule"] == "sync" and fork["steps_found"]["steps"] == 12
    assert [r["per_step"] for r in fork["syncs_per_step"] if r["flagged"]] == [16.0, 16.0]


@pytest.mark.parametrize(
    "trace", ["traces/qwen3-0.6b-s1-d2.sqlite.gz", "traces/foreign/torch-graphs.sqlite.gz"]
)
def test_a_slimmed_export_reads_the_same_every_figure(tmp_path, trace):
    """A sweep's exports lose the kernel columns no query reads (runs.passes.compress): every table
    and row stays, and analyze's whole answer, kernel view included, is the same."""
    import gzip
    import sqlite3

    from bubblelab.cli import main
    from bubblelab.profiling.trim import UNREAD_KERNEL_COLUMNS
    from bubblelab.runs.passes import compress

    (tmp_path / "whole").mkdir(), (tmp_path / "slim").mkdir()
    whole, slim = tmp_path / "whole" / "run.sqlite", tmp_path / "slim" / "run.sqlite"
    whole.write_bytes(gzip.decompress((ROOT / trace).read_bytes()))
    slim.write_bytes(whole.read_bytes())
    (packed,) = compress([slim])
    assert packed.name == "run.sqlite.gz" and not slim.exists()
    slim.write_bytes(gzip.decompress(packed.read_bytes()))

    def tables(path: Path) -> dict[str, tuple[int, list[str]]]:
        db = sqlite3.connect(path)
        names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        rows = {n: db.execute(f'SELECT count(*) FROM "{n}"').fetchone()[0] for n in names}
        cols = {n: [c[1] for c in db.execute(f'PRAGMA table_info("{n}")')] for n in names}
        out = {n: (rows[n], cols[n]) for n in names}
        db.close()
        return out

    before, after = tables(whole), tables(slim)
    kernels = "CUPTI_ACTIVITY_KIND_KERNEL"
    assert before.keys() == after.keys()
    assert {n: rows for n, (rows, _) in before.items()} == {n: r for n, (r, _) in after.items()}
    assert after[kernels][1] == [c for c in before[kernels][1] if c not in UNREAD_KERNEL_COLUMNS]
    assert {n: cols for n, (_, cols) in before.items() if n != kernels} == {
        n: cols for n, (_, cols) in after.items() if n != kernels
    }
    # 0.62 of the whole trace at level 1 on ours, 0.76 on torch-graphs (fewer kernels a step)
    assert packed.stat().st_size < 0.8 * len(gzip.compress(whole.read_bytes(), 1))

    def answer(path: Path) -> str:
        main(["analyze", str(path), "--kernels", f"--json={path}.json"])
        text = Path(f"{path}.json").read_text().replace(str(path.parent), "DIR")
        for run_id in set(re.findall(r'"run_id": "([0-9a-f]{16})', text)):
            text = text.replace(run_id, "RUN").replace(run_id[:8], "RUN")  # the content's hash
        return text

    assert answer(whole) == answer(slim)
