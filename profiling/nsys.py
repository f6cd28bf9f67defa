"""Run a command under Nsight Systems and get its SQLite export(s).

The capture covers only what the run brackets with cudaProfilerStart/Stop
(torch.cuda.profiler.start/stop after warm-up), traces CUDA and NVTX, and by default expands CUDA
graphs node by node so their kernels are visible (graph_trace "node"). Node tracing costs each
cudaGraphLaunch ~0.2-0.25 ms of host time on an H200, which a blocking loop exposes as bubble;
"graph" records a replay as one row (its kernels unseen) and costs less (~0.1 ms a launch on an
H200), though the host still runs far slower than unprofiled (profiling/README.md).
One process may bracket many runs: with --capture-range-end=repeat (nsys 2025.3) every range is its
own report, <out>.1.nsys-rep, <out>.2.nsys-rep, ... in the order they ran, or <out>.nsys-rep when
there was one range (start_ranges / finish_ranges). A sweep's nsys pass on one GPU is one range,
its runs marked in it and cut apart after (runs.passes).
Commands are argument lists handed to subprocess, never a shell, so any path or argument is safe.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

from ..core.checks import check_choice
from ..core.errors import BubblelabError
from ..core.files import map_files, write_atomic

PROFILE_OPTIONS = (
    "-t",
    "cuda,nvtx",
    "-s",
    "none",
    "--cpuctxsw=none",
    "--cuda-graph-trace=node",
    "--capture-range=cudaProfilerApi",
    "--capture-range-end=stop",
    "--export",
    "sqlite",
)
GRAPH_TRACE_MODES = ("node", "graph")  # nsys --cuda-graph-trace: per kernel, or per replay


def find_nsys() -> str:
    """The nsys executable: $NSYS if set, else the one on PATH."""
    override = os.environ.get("NSYS")
    if override:
        if not (Path(override).is_file() and os.access(override, os.X_OK)):
            raise BubblelabError(f"$NSYS={override} is not an executable file")
        return override
    found = shutil.which("nsys")
    if found is None:
        raise BubblelabError("nsys (Nsight Systems) not found: put it on PATH or set $NSYS")
    return found


def nsys_version() -> str:
    """E.g. '2025.3.2.474' from `nsys --version`, asked once per executable (a sweep's assembly
    stamps every profiled run with it, and each `nsys --version` starts nsys anew)."""
    return _version_of(find_nsys())


@functools.cache
def _version_of(executable: str) -> str:
    out = _run([executable, "--version"], timeout=60).stdout
    match = re.search(r"\d{4}\.\d+(\.\d+)*", out)
    if match is None:
        raise BubblelabError(f"cannot read the nsys version from {out.strip()!r}")
    return match.group(0)


def export_path(out_base: Path) -> Path:
    """Where nsys writes the SQLite export for `-o out_base` (names may contain dots)."""
    return out_base.parent / f"{out_base.name}.sqlite"


def profile_command(
    out_base: Path, argv: list[str], capture_end: str = "stop", graph_trace: str = "node"
) -> list[str]:
    """The full argument list that profiles `argv` and exports `<out_base>.sqlite` (capture_end
    "stop": the first capture range) or `<out_base>.<n>.sqlite` per range ("repeat"); graph_trace:
    CUDA graphs traced by "node" (their kernels seen) or as whole "graph" replays (lighter)."""
    check_choice("cuda_graph_trace", graph_trace, GRAPH_TRACE_MODES)
    chosen = {"--capture-range-end": capture_end, "--cuda-graph-trace": graph_trace}
    options = []
    for option in PROFILE_OPTIONS:
        name = option.split("=")[0]
        options.append(f"{name}={chosen[name]}" if name in chosen else option)
    return [
        find_nsys(),
        "profile",
        *options,
        "-o",
        str(out_base),
        "--force-overwrite",
        "true",
        *argv,
    ]


def run_under_nsys(
    out_base: Path,
    argv: list[str],
    *,
    timeout: float | None = None,
    env: dict[str, str] | None = None,
    graph_trace: str = "node",
) -> Path:
    """Profile `argv`; return the SQLite export. Failures are one-line BubblelabErrors."""
    out_base = Path(out_base)
    out_base.parent.mkdir(parents=True, exist_ok=True)
    command = profile_command(out_base, argv, graph_trace=graph_trace)
    result = _run(command, timeout=timeout, env=env)
    trace = export_path(out_base)
    if not trace.is_file():
        raise BubblelabError(
            f"nsys wrote no {trace.name}: did the run call torch.cuda.profiler.start()? "
            f"({_last_line(result.stderr or result.stdout)})"
        )
    return trace


def export_sqlite(report: Path, out: Path, timeout: float | None = 600) -> Path:
    """`nsys export --type sqlite` of a .nsys-rep into `out` (a .sqlite path); returns out."""
    _run(
        [
            find_nsys(),
            "export",
            "--type",
            "sqlite",
            "--force-overwrite",
            "true",
            "--output",
            str(out),
            str(report),
        ],
        timeout=timeout,
    )
    if not out.is_file():
        raise BubblelabError(f"nsys export wrote no {out.name} for {report}")
    return out


def profile_ranges(
    out_base: Path,
    argv: list[str],
    *,
    timeout: float | None = None,
    env: dict[str, str] | None = None,
    log: Path | None = None,
    graph_trace: str = "node",
) -> list[Path]:
    """Profile `argv`, one report per cudaProfilerApi range; return their SQLite exports in the
    order the ranges ran (start_ranges, then finish_ranges)."""
    ranges = start_ranges(out_base, argv, env=env, graph_trace=graph_trace)
    return finish_ranges(ranges, timeout=timeout, log=log)


class Ranges:
    """An nsys session under way (start_ranges): its process and where its reports go."""

    def __init__(self, proc: subprocess.Popen, out_base: Path, cmd: list[str]):
        self.proc, self.out_base, self.cmd = proc, out_base, cmd


def capture_mode(engine: dict) -> str:
    """How an nsys pass of this engine (EngineConfig kwargs) captures its runs: "pass", one capture
    range with each run marked in it (cut into a trace per run after: runs.passes.split_pass), or
    "run", a range per run. nsys stops the app for seconds at each range's end; a tensor-parallel
    pass, whose ranks each open their own ranges, keeps a range per run."""
    one_gpu = str(engine["device"]).startswith("cuda") and engine.get("tensor_parallel", 1) == 1
    return "pass" if one_gpu else "run"


def start_ranges(
    out_base: Path,
    argv: list[str],
    *,
    env: dict[str, str] | None = None,
    graph_trace: str = "node",
) -> Ranges:
    """Start profiling `argv` (one report per cudaProfilerApi range) and return at once, so the
    caller can do other work while it runs (runs.passes starts the next pass's worker)."""
    out_base = Path(out_base)
    out_base.parent.mkdir(parents=True, exist_ok=True)
    cmd = profile_command(out_base, argv, "repeat", graph_trace)
    try:
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=None if env is None else {**os.environ, **env},
        )
    except OSError as e:
        raise BubblelabError(f"cannot start {cmd[0]}: {e.strerror}") from None
    return Ranges(proc, out_base, cmd)


def finish_ranges(
    ranges: Ranges, *, timeout: float | None = None, log: Path | None = None
) -> list[Path]:
    """Wait for the session; return its SQLite exports in the order the ranges ran. Reports nsys
    left unexported are exported here, side by side. log: where to keep what nsys and the command
    printed (nsys's report lines between the command's own show when nsys wrote each report)."""
    try:
        output, _ = ranges.proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        ranges.proc.kill()
        ranges.proc.communicate()
        raise BubblelabError(f"nsys profile timed out after {timeout} s") from None
    ended = time.time()
    out_base = ranges.out_base
    if ranges.proc.returncode != 0:
        # Keep what the command printed: nsys's last line ("No reports were generated") hides the
        # profiled command's own error, which is the one to name.
        if log is not None:
            write_atomic(log, output)
        where = f" (whole output: {log})" if log is not None else ""
        raise BubblelabError(
            f"nsys profile exited with {ranges.proc.returncode}: {_cause(output)}{where}"
        )
    # <out_base>.<n>.nsys-rep per range; a session of one range names its report <out_base>.nsys-rep
    pattern = re.compile(re.escape(out_base.name) + r"(?:\.(\d+))?\.nsys-rep$")
    reports = sorted(
        (int(m.group(1) or 0), p) for p in out_base.parent.iterdir() if (m := pattern.match(p.name))
    )
    exports = [report.with_suffix(".sqlite") for _, report in reports]
    left = [(r, e) for (_, r), e in zip(reports, exports, strict=True) if not e.is_file()]
    map_files(lambda pair: export_sqlite(pair[0], pair[1], timeout), left)
    if log is not None:
        write_atomic(
            log,
            f"{output}[profile_ranges {ended:.3f}] nsys exited; exported here: "
            f"{', '.join(e.name for _, e in left) or 'none'} ({time.time() - ended:.1f} s)\n",
        )
    if not exports:
        raise BubblelabError(
            f"nsys wrote no {out_base.name}.<n>.nsys-rep: did the runs call "
            f"torch.cuda.profiler.start()? ({_last_line(output)})"
        )
    return exports


def _run(
    cmd: list[str], *, timeout: float | None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    try:
        result = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=None if env is None else {**os.environ, **env},
        )
    except subprocess.TimeoutExpired:
        raise BubblelabError(f"{Path(cmd[0]).name} {cmd[1]} timed out after {timeout} s") from None
    except OSError as e:
        raise BubblelabError(f"cannot start {cmd[0]}: {e.strerror}") from None
    if result.returncode != 0:
        raise BubblelabError(
            f"{Path(cmd[0]).name} {cmd[1]} exited with {result.returncode}: "
            f"{_last_line(result.stderr or result.stdout)}"
        )
    return result


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def _cause(text: str) -> str:
    """The profiled command's last Python error line when it printed one (nsys's own last line
    follows it), else the output's last line."""
    errors = [
        line.strip()
        for line in text.splitlines()
        if re.match(r"[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b", line.strip())
    ]
    last = _last_line(text)
    return f"{errors[-1]}; then {last}" if errors else last
