"""Every way a tensor-parallel process ends, each run as a fresh script with a timeout (a hang fails
instead of hanging the caller): tests/test_tensor_parallel_shutdown.py (gloo), the GPU test and
tools/gpu_machine/tp_shutdown_times.py (NCCL).

A scenario script builds `LLM(tensor_parallel=2)`, reports its workers' pids and the /dev/shm names
the engine made, generates, then ends one way; it prints `REPORT {json}` lines along the way, with
monotonic times (one clock for every process of the host). `run` starts it in its own session (so
"ctrl-c" can signal the whole process group without reaching the caller) and reads what was left.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# What each scenario does after the first few steps, and whether the script exits with 0.
SCENARIOS = {
    "close": "generate, then close()",
    "with": "generate inside `with LLM(...)`",
    "exit": "generate, never close: interpreter exit",
    "exception": "an exception inside generate (on_step raises), inside `with`",
    "sigint": "SIGINT to the parent alone, mid-generate (from a timer thread), never closed",
    "ctrl-c": "SIGINT to the whole process group, as a terminal's Ctrl-C, never closed",
    "kill": "SIGKILL to the worker mid-generate: generate raises, then close()",
    "init-kill": "SIGKILL to the worker once it joined the group, while rank 0 initialises",
    "noguard": "the LLM built at module level without the __main__ guard",
}
FAILS = {"sigint", "ctrl-c", "noguard"}  # the script itself ends with an error

_BODY = """
import atexit, gc, json, multiprocessing as mp, os, signal, sys, threading, time
from bubblelab.engine import LLM
from bubblelab.engine.sampling_params import SamplingParams

SCENARIO, OPTIONS = sys.argv[1], json.loads(sys.argv[2])
T = time.monotonic


def say(**fields):
    print("REPORT " + json.dumps(fields), flush=True)


def ipc_names(w):
    sems = [*w.ready, *w.space, w.replies._rlock, w.replies._wlock, w.replies._sem]
    return [w.ring.spec.name] + ["sem." + s._semlock.name.lstrip("/") for s in sems]


def left_behind(names):
    return {"children": len(mp.active_children()),
            "shm_left": [n for n in names if os.path.exists("/dev/shm/" + n)]}


def after_steps(n, action):
    count = [0]

    def on_step():
        count[0] += 1
        if count[0] == n:
            action()

    return on_step


def cuda_memory():
    # What the caching allocator still holds once the engine is gone: reserved, live (allocated),
    # and reserved before cuBLAS let go of its workspaces, which it keeps per (handle, stream) for
    # the process's life (64 MiB after one engine on an H100): torch's, not the engine's.
    import torch

    if not torch.cuda.is_available():
        return {"cuda_reserved": None}
    gc.collect()
    torch.cuda.empty_cache()
    with_workspaces = torch.cuda.memory_reserved()
    torch._C._cuda_clearCublasWorkspaces()
    torch.cuda.empty_cache()
    return {
        "cuda_reserved": torch.cuda.memory_reserved(),
        "cuda_allocated": torch.cuda.memory_allocated(),
        "cuda_reserved_with_cublas_workspaces": with_workspaces,
    }


def kill_at_init():
    # The worker dies right after both joined the process group: rank 0 meets the dead peer in the
    # KV sizing's collective (on NCCL only the init watch's abort ends that wait).
    from bubblelab.engine.distributed import workers as tp

    join = tp.init_group

    def join_then_die(*args):
        join(*args)
        kids = mp.active_children()
        say(pids=[p.pid for p in kids], shm=[], done=T())
        for p in kids:
            os.kill(p.pid, signal.SIGKILL)

    tp.init_group = join_then_die
    try:
        LLM(**OPTIONS)
    except Exception as e:
        say(raised=T(), error=f"{type(e).__name__}: {e}", **left_behind([]))


def main():
    if SCENARIO == "init-kill":
        return kill_at_init()
    # Registered before the engine's own atexit close, so it runs after it (last in, first out):
    # how each worker had ended by then (0: it left by itself; -9: it had to be killed).
    procs = []
    atexit.register(lambda: say(exitcodes=[p.exitcode for p in procs]))
    llm = LLM(**OPTIONS)
    w = llm.engine.workers
    procs.extend(w.procs)
    names = ipc_names(w)
    say(pids=[p.pid for p in w.procs], shm=names, built=T())
    prompts = [[3 + i, 5, 7, 11, 13] for i in range(4)]
    params = SamplingParams(max_tokens=64, ignore_eos=True)
    if SCENARIO in ("close", "with"):
        if SCENARIO == "close":
            llm.generate(prompts, params)
            say(done=T())
            llm.close()
        else:
            with llm:
                llm.generate(prompts, params)
                say(done=T())
        say(closed=T(), **left_behind(names))
        del llm, w
        say(**cuda_memory())
    elif SCENARIO == "exit":
        llm.generate(prompts, params)
        say(done=T())
    elif SCENARIO == "exception":
        def boom():
            say(done=T())
            raise RuntimeError("boom")

        try:
            with llm:
                llm.generate(prompts, params, on_step=after_steps(3, boom))
        except RuntimeError as e:
            say(closed=T(), error=str(e), **left_behind(names))
    elif SCENARIO in ("sigint", "ctrl-c"):
        def interrupt():
            say(done=T())
            if SCENARIO == "sigint":
                os.kill(os.getpid(), signal.SIGINT)
            else:
                os.killpg(os.getpgid(0), signal.SIGINT)

        timer = lambda: threading.Timer(0.01, interrupt).start()
        llm.generate(prompts, params, on_step=after_steps(3, timer))
        time.sleep(30)  # the interrupt lands before this ends
    elif SCENARIO == "kill":
        def kill():
            say(done=T())
            os.kill(w.procs[0].pid, signal.SIGKILL)

        try:
            llm.generate(prompts, params, on_step=after_steps(3, kill))
        except Exception as e:
            say(raised=T(), error=f"{type(e).__name__}: {e}")
        llm.close()
        say(closed=T(), **left_behind(names))
"""

_GUARDED = _BODY + '\n\nif __name__ == "__main__":\n    main()\n'
_UNGUARDED = _BODY + "\n\nsay(started=T())\nmain()  # no guard: each worker runs this again\n"


def engine_options(device: str, preset: str | None = None) -> dict:
    """LLM(...) options for the scenarios: tiny-llama on the CPU; on CUDA a small Qwen3 preset
    with CUDA graphs on (they capture the all-reduces, which is what NCCL's teardown is strict
    about) and the fused ops eager (compiling them costs a fresh machine a minute)."""
    common = dict(tensor_parallel=2, tensor_parallel_timeout_s=5.0, max_num_seqs=4,
                  max_model_len=128, seed=1)  # fmt: skip
    if device == "cpu":
        return dict(common, model=preset or "tiny-llama", block_size=4, num_kv_blocks=128)
    return dict(common, model=preset or "qwen3-0.6b", device="cuda", dtype="bf16", compile=False,
                num_kv_blocks=256)  # fmt: skip


@dataclass
class Outcome:
    scenario: str
    returncode: int | None  # None: killed at the timeout
    wall_s: float
    ended: float  # monotonic time when the script and every holder of its output had ended
    reports: dict[str, Any] = field(default_factory=dict)
    stderr: str = ""

    def left_running(self) -> list[int]:
        """The workers still alive (a zombie nobody reaped counts as ended)."""
        return [p for p in self.reports.get("pids", []) if _running(p)]

    def shm_left(self) -> list[str]:
        return [n for n in self.reports.get("shm", []) if Path("/dev/shm", n).exists()]

    def teardown_s(self) -> float | None:
        """From the moment the scenario began to end the engine until the process had ended."""
        done = self.reports.get("done")
        return None if done is None else self.ended - done


def run(scenario: str, options: dict, workdir: Path, timeout_s: float = 180) -> Outcome:
    """Run one scenario's script with `options` for LLM(...); never hangs past timeout_s."""
    script = Path(workdir, f"tp_{scenario.replace('-', '_')}.py")
    script.write_text(textwrap.dedent(_UNGUARDED if scenario == "noguard" else _GUARDED))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, str(script), scenario, json.dumps(options)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=workdir,
        start_new_session=True,
    )  # fmt: skip
    try:
        # Returns once every process holding the pipes (the workers too) has ended.
        out, err = proc.communicate(timeout=timeout_s)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        code = None
    ended = time.monotonic()
    reports: dict[str, Any] = {}
    for line in out.splitlines():
        if line.startswith("REPORT "):
            reports.update(json.loads(line[7:]))
    return Outcome(scenario, code, ended - started, ended, reports, err)


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z"
