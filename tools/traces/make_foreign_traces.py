"""Profile engines bubblelab did not build on the GPU machine; write small trimmed nsys traces.

Staged first, here: `bash tools/gpu_machine/stage_nanovllm.sh` (the original nano-vllm as source
in .peers/nano-vllm), flash-attn-4 unstaged in the same warm session (tools/gpu_machine/README.md),
and the nano-vllm-fork wheel (`--fork-wheel`, or in .device/whl). Then on the GPU machine (H200),
from the checkout's root, carrying .device, .peers and the wheel's folder:

    source tools/gpu_machine/setup.sh && bash tools/gpu_machine/unstage_flash_attn.sh && \\
      source /tmp/fa4site/env.sh && python3 -m tools.traces.make_foreign_traces --out $OUT \\
      --fork-wheel .whl-fork/nano_vllm_fork-20260210-py3-none-any.whl

Each engine (tools/traces/foreign_engines.py) runs in its own process under `nsys profile -t
cuda,nvtx,osrt -s none --cpuctxsw=none --cuda-graph-trace=node --capture-range=cudaProfilerApi
--capture-range-end=stop --export sqlite`, with a timeout; a failure is one line in the summary and
the others still run; no job starts past --budget-s. Each export is then analysed (the foreign step
finder), cut to at most --keep-steps steps (profiling.trim.trim_foreign) and gzipped. Under
$OUT/foreign/:

    <name>.sqlite.gz   one per trace: nanovllm-raw and nanovllm-nvtx (one process, one capture: the
                       workload raw, then with an NVTX range per LLMEngine.step), nano-vllm-fork,
                       jax-decode, hf-generate, cupy-decode
    index.json         per trace: engine, version, command, workload (traces/index.json's form)
    summary.json       per engine: ok or why not, seconds; per trace its analysis and prediction

At most 8 files, two folders deep. `--dry-run` (any machine) checks the set-up and runs the trimming
and analysis on the probe trace instead.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tools.traces.foreign_finish import digest, finish, step_window, trim_and_gzip

ROOT = Path(__file__).resolve().parents[2]
ENGINES = "tools.traces.foreign_engines"  # run as a module from ROOT
TRACED = "cuda,nvtx,osrt"  # without osrt if this nsys cannot trace OS calls (then retried once)


def nsys_args(traced: str = TRACED, whole: bool = False) -> list[str]:
    """nsys's options; `whole`: no capture range (a worker process nobody can make call
    cudaProfilerStart would otherwise go untraced, if nsys brackets each process on its own)."""
    bracket = [] if whole else ["--capture-range=cudaProfilerApi", "--capture-range-end=stop"]
    return [
        "profile", "-t", traced, "-s", "none", "--cpuctxsw=none", "--cuda-graph-trace=node",
        *bracket, "--export", "sqlite", "--force-overwrite", "true",
    ]  # fmt: skip


SHIMS = (
    ROOT / "tools" / "gpu_machine" / "flash_attn_shim",
    ROOT / "benchmarks" / "flash_attn_shim",
)


@dataclass
class Job:
    name: str  # also the worker's name in foreign_engines.py
    timeout_s: float
    engine: str
    traces: list[str]  # fixture names this job yields
    env: dict = field(default_factory=dict)
    job: dict = field(default_factory=dict)
    whole: bool = False  # traced from start to end (nsys_args)
    opt_in: bool = False  # runs only when --only names it (its trace would pass the 8 files back)


def jobs(args: argparse.Namespace, work: Path) -> list[Job]:
    """The runs, most important first (the write-up's engine, then the 129-sync fork)."""
    source, shim = str(args.nano_vllm.resolve()), str(args.fa_shim.resolve())
    nano_ckpt, fork_ckpt = work / f"ckpt-{args.nano_preset}", work / f"ckpt-{args.fork_preset}"
    fork_path = [str(args.fork_site)] if args.fork_site else []
    return [
        Job(
            "ckpt",
            150,
            "seeded random weights",
            [],
            job={
                "checkpoints": {args.nano_preset: str(nano_ckpt), args.fork_preset: str(fork_ckpt)}
            },
        ),
        Job(
            "nano",
            200,
            "nano-vllm (github GeeeekExplorer/nano-vllm)",
            ["nanovllm-raw", "nanovllm-nvtx"],
            env={"PYTHONPATH": [source, shim]},
            job={"ckpt": str(nano_ckpt), "source": source},
        ),
        Job(
            "fork",
            120,
            "nano-vllm-fork (PyPI)",
            ["nano-vllm-fork"],
            env={"PYTHONPATH": [*fork_path, shim]},
            job={"ckpt": str(fork_ckpt), "source": source, "gpu_memory_utilization": 0.3},
        ),
        Job(
            "nano-tp2",
            240,
            "nano-vllm (github GeeeekExplorer/nano-vllm), tensor parallel 2",
            ["nanovllm-tp2"],
            env={"PYTHONPATH": [source, shim]},
            job={"ckpt": str(nano_ckpt), "source": source, "gpu_memory_utilization": 0.5},
            whole=True,
            opt_in=True,
        ),
        Job("jax", 90, "JAX jitted decode loop", ["jax-decode"], job={"steps": 200}),
        Job("hf", 90, "transformers generate", ["hf-generate"], job={"preset": args.fork_preset}),
        Job("cupy", 60, "CuPy decode loop", ["cupy-decode"], job={"steps": 200}),
        # issue #24's engine shapes, run when --only names them (8 files come back at most)
        Job(
            "graphs",
            90,
            "torch, one CUDA graph a layer",
            ["torch-graphs"],
            job={"steps": 200},
            opt_in=True,
        ),
        Job(
            "compiled",
            180,
            "torch.compile reduce-overhead",
            ["torch-compiled"],
            job={"steps": 200},
            opt_in=True,
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="$OUT: traces land in OUT/foreign/")
    parser.add_argument(
        "--nano-vllm",
        type=Path,
        default=ROOT / ".peers" / "nano-vllm",
        help="source checkout of the original nano-vllm (holds nanovllm/)",
    )
    parser.add_argument(
        "--fa-shim",
        type=Path,
        default=next(
            (d for d in SHIMS if (d / "flash_attn").is_dir()), SHIMS[0]
        ),  # it is moving from benchmarks/ to tools/gpu_machine/
        help="folder holding the FA2-API `flash_attn` shim over flash-attn-4",
    )
    parser.add_argument(
        "--fork-site",
        type=Path,
        default=None,
        help="folder where nano-vllm-fork is installed (default: importable as is)",
    )
    parser.add_argument(
        "--fork-wheel",
        type=Path,
        default=None,
        help="nano-vllm-fork wheel to install (pip --no-deps --target) for the fork's run",
    )
    parser.add_argument("--nano-preset", default="qwen3-4b", help="bubblelab preset for nano-vllm")
    parser.add_argument("--fork-preset", default="qwen3-0.6b", help="preset for the fork and HF")
    parser.add_argument(
        "--only",
        default=None,
        help="comma-separated jobs (ckpt,nano,fork,jax,hf,cupy; nano-tp2, graphs, compiled only "
        "when named)",
    )
    parser.add_argument("--budget-s", type=float, default=360, help="no job starts past this")
    parser.add_argument(
        "--keep-steps", type=int, default=300, help="steps kept per trace (the middle)"
    )
    parser.add_argument(
        "--work", type=Path, default=None, help="scratch folder (default: a temp dir)"
    )
    parser.add_argument("--dry-run", action="store_true", help="check the set-up; trim the probe")
    args = parser.parse_args(argv)
    out = args.out / "foreign"
    out.mkdir(parents=True, exist_ok=True)
    work = args.work or Path(tempfile.mkdtemp(prefix="foreign-traces-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.fork_wheel and not args.dry_run:
        try:  # a failure here is the fork job's to report (it will not import), not the run's
            args.fork_site = install_wheel(args.fork_wheel, work / "fork-site")
        except (OSError, subprocess.CalledProcessError) as e:
            print(f"cannot install {args.fork_wheel}: {e}", flush=True)
    planned = [j for j in jobs(args, work) if not j.opt_in or args.only]
    if args.only:
        wanted = set(args.only.split(","))
        planned = [
            j
            for j in planned
            if j.name in wanted or (j.name == "ckpt" and wanted & {"nano", "nano-tp2", "fork"})
        ]
    summary: dict = {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "jobs": {}, "traces": {}}
    index: dict = {}

    def save() -> None:  # after every job: a run killed at its time limit keeps what it finished
        (out / "index.json").write_text(json.dumps(index, indent=1))
        (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))

    try:
        if args.dry_run:
            summary["dry_run"] = dry_run(args, planned, out, work)
        else:
            run_all(args, planned, out, work, summary, index, save)
    except Exception as e:  # noqa: BLE001 - e.g. no nsys: say so in the summary, still write it
        summary["fatal"] = f"{type(e).__name__}: {e}"
        print(f"fatal: {summary['fatal']}", flush=True)
    save()
    for name, status in summary["jobs"].items():
        why, seconds = status.get("why", ""), status.get("seconds", 0)
        print(f"{name:6} {status['status']}: {why} ({seconds:.0f} s)")
    return 0


def install_wheel(wheel: Path, target: Path) -> Path:
    """pip install --no-deps --target: the fork's own dependencies are the GPU machine's."""
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target",
         str(target), str(wheel)],
        check=True,
    )  # fmt: skip
    return target


def run_all(
    args, planned: list[Job], out: Path, work: Path, summary: dict, index: dict, save
) -> None:
    from bubblelab.profiling.nsys import find_nsys

    t0 = time.monotonic()
    nsys = find_nsys()
    for job in planned:
        left = args.budget_s - (time.monotonic() - t0)
        if left < 20:
            summary["jobs"][job.name] = {
                "status": "skipped",
                "why": f"past --budget-s {args.budget_s}",
            }
            continue
        started = time.monotonic()
        try:
            try:
                info = run_job(job, work, nsys, min(job.timeout_s, left))
            except RuntimeError as e:
                if job.name == "ckpt" or "osrt" not in str(e).lower():
                    raise
                left = args.budget_s - (time.monotonic() - t0)
                info = run_job(job, work, nsys, min(job.timeout_s, left), traced="cuda,nvtx")
                info["note"] = "OS runtime calls not traced: this nsys refused -t osrt"
            summary["jobs"][job.name] = {"status": "ok", "info": info}
            for trace in job.traces:  # one trace's failure does not cost the job's other trace
                try:
                    entry, digest = finish(trace, job, info, work, out, args.keep_steps)
                    index[f"{trace}.sqlite.gz"] = entry
                    summary["traces"][trace] = digest
                except Exception as e:  # noqa: BLE001
                    summary["traces"][trace] = {"failed": f"{type(e).__name__}: {e}"[:400]}
        except Exception as e:  # noqa: BLE001 - one engine's failure is one line, the others still run
            summary["jobs"][job.name] = {
                "status": "failed",
                "why": f"{type(e).__name__}: {e}"[:400],
            }
        summary["jobs"][job.name]["seconds"] = round(time.monotonic() - started, 1)
        save()
        print(
            f"[{time.monotonic() - t0:5.0f} s] {job.name}: {summary['jobs'][job.name]['status']}",
            flush=True,
        )


def run_job(job: Job, work: Path, nsys: str, timeout: float, traced: str = TRACED) -> dict:
    """Run one worker (under nsys unless it only writes checkpoints); returns its info JSON."""
    info_path = work / f"{job.name}.info.json"
    info_path.unlink(missing_ok=True)
    payload = json.dumps({**job.job, "info": str(info_path)})
    command = [sys.executable, "-m", ENGINES, job.name, payload]
    if job.name != "ckpt":
        command = [nsys, *nsys_args(traced, job.whole), "-o", str(work / job.name), *command]
    env = dict(os.environ)
    for key, parts in job.env.items():
        env[key] = os.pathsep.join([*parts, env.get(key, "")])
    log = work / f"{job.name}.log"
    started = time.monotonic()
    with log.open("w") as log_f:  # a file, not a pipe: a child's leftovers could hold a pipe open
        proc = subprocess.Popen(
            command,
            env=env,
            stdout=log_f,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=ROOT,
        )
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = None
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # its group: nsys, the worker, compile workers
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
    info = json.loads(info_path.read_text()) if info_path.is_file() else {}
    info["command"] = " ".join(
        ["nsys", *nsys_args(traced, job.whole), "-o", job.name, "python3", "-m", ENGINES]
        + [job.name, "JOB"]
        if job.name != "ckpt"
        else command[1:4]
    )
    if rc != 0:
        tail = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()][-3:]
        why = "timed out" if rc is None else f"exit {rc}"
        raise RuntimeError(f"{why} after {time.monotonic() - started:.0f} s: {' | '.join(tail)}")
    if job.name != "ckpt" and not (work / f"{job.name}.sqlite").is_file():
        raise RuntimeError("nsys wrote no SQLite export (did the capture range start?)")
    return info


def dry_run(args, planned: list[Job], out: Path, work: Path) -> dict:
    """Check what each job needs, without a GPU; then trim, gzip and analyse the probe trace the way
    the real traces will be (into the scratch folder, not OUT)."""
    import importlib.util

    def have(module: str) -> bool:
        return importlib.util.find_spec(module) is not None

    checks: dict[str, object] = {
        "nsys": shutil.which("nsys")
        or os.environ.get("NSYS")
        or "missing (source .device/remote-setup.sh)",
        "nano-vllm source": "ok"
        if (args.nano_vllm / "nanovllm" / "__init__.py").is_file()
        else f"missing: {args.nano_vllm}/nanovllm",
        "flash_attn shim": "ok"
        if (args.fa_shim / "flash_attn").is_dir()
        else f"missing: {args.fa_shim}",
        **{
            m: "ok" if have(m) else "missing"
            for m in ("torch", "transformers", "nvtx", "jax", "cupy")
        },
        "jobs": [j.name for j in planned],
        "nsys command": " ".join(
            [
                "nsys",
                *nsys_args(),
                "-o",
                "<work>/<job>",
                "python3",
                "-m",
                ENGINES,
                "<job>",
                "<json>",
            ]
        ),
    }
    probe = ROOT / "traces" / "nsys-h200-probe.sqlite"
    from bubblelab.profiling.steps import StepOptions

    first, last = step_window(probe, StepOptions(), 20)
    gz = trim_and_gzip(probe, work / "probe-trimmed.sqlite", first, last, StepOptions(), 20)
    checks["probe"] = {
        "steps": [first, last],
        "gz_bytes": gz.stat().st_size,
        "analysis": digest(gz, StepOptions(), None)["steps_found"],
    }
    for name, status in checks.items():
        print(f"{name}: {status}")
    return checks


if __name__ == "__main__":
    sys.exit(main())
