"""The original nano-vllm (GeeeekExplorer/nano-vllm, source staged in .peers/nano-vllm) in a child
process of its own.

The child (`python -m benchmarks.peer_nanovllm --serve JOB`) loads nano-vllm once, then runs one
case per command, so its engine can take turns with bubblelab's; its torch.distributed group,
default device and dtype and compiler settings stay out of the harness, and a hang is killed with
its whole process group (TP workers, compile workers). Commands and replies are JSON lines on the
child's stdin and stdout; whatever else it prints goes to a log file.

nano-vllm runs as its authors ship it. From outside, only: its tokenizer is a stub (random weights
have no vocabulary; prompts are token ids already), and the environment turns NVLink multicast off
in every process (the GPU machine requires it; TP workers inherit it).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import IO, Any

from benchmarks.compare_common import first_line, last_error_line
from bubblelab.core.files import write_atomic

ROOT = Path(__file__).resolve().parents[1]
# tools/gpu_machine/stage_nanovllm.sh exports the source here
NANOVLLM = ROOT / ".peers" / "nano-vllm"
# a `flash_attn` with FA2's API over flash-attn-4
SHIM = ROOT / "tools" / "gpu_machine" / "flash_attn_shim"
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                "NVSHMEM_DISABLE_NVLS": "1"}  # fmt: skip
STANDIN_ENV = "BUBBLELAB_NANOVLLM_STANDIN"  # tests: a CPU stand-in package, no CUDA checks


class PeerError(RuntimeError):
    """The child failed, hung or exited; the message is one line."""


def staged_commit(path: Path) -> str | None:
    """The commit recorded by the staging script, or None when nothing is staged at `path`."""
    if not (path / "nanovllm" / "__init__.py").is_file():
        return None
    commit = path / "COMMIT"
    return commit.read_text().strip() if commit.is_file() else "unknown"


def peer_status(path: Path, device: str, tensor_parallel: int) -> tuple[str | None, str]:
    """(None, attention) when nano-vllm can run here, else ("not run: <why>", ""). It needs its
    source, CUDA with enough GPUs, and FA2's API: a real flash-attn 2, or flash-attn-4 under the
    shim."""
    if staged_commit(path) is None:
        stage = "bash tools/gpu_machine/stage_nanovllm.sh"
        return f"not run: no nano-vllm source at {path} (stage it: {stage})", ""
    if os.environ.get(STANDIN_ENV):
        return None, "stand-in"
    import torch

    from bubblelab.engine.attention.flash_backend import fa2_entries, fa4_entry

    if device != "cuda" or not torch.cuda.is_available():
        return "not run: nano-vllm needs CUDA (NCCL, CUDA graphs, flash-attn)", ""
    if torch.cuda.device_count() < tensor_parallel:
        return (
            f"not run: tensor parallel {tensor_parallel} needs {tensor_parallel} GPUs, "
            f"{torch.cuda.device_count()} visible",
            "",
        )
    if fa4_entry() is not None:
        return None, "flash-attn-4 (FA2-API shim)"
    if fa2_entries() is not None:
        return None, "flash-attn 2"
    try:  # why FA4 did not import: the line that lets the next run fix it
        import flash_attn.cute  # noqa: F401

        why = "imports, but has no flash_attn_varlen_func"
    except Exception as exc:  # noqa: BLE001
        why = f"{type(exc).__name__}: {first_line(exc)}"
    return f"not run: neither flash-attn-4 (`flash_attn.cute`: {why}) nor flash-attn 2 imports", ""


def write_hf_checkpoint(loaded: Any, directory: Path) -> Path:
    """config.json + model.safetensors of our seeded random weights (engine.export.to_hf)."""
    from safetensors.torch import save_file

    from bubblelab.engine.export import to_hf

    raw, state = to_hf(loaded)
    directory.mkdir(parents=True, exist_ok=True)
    # a copy gives every split view its own storage (safetensors refuses shared ones)
    cpu = {n: t.detach().to("cpu", copy=True).contiguous() for n, t in state.items()}
    save_file(cpu, str(directory / "model.safetensors"))
    write_atomic(directory / "config.json", json.dumps(raw))
    return directory


# -- the parent's side ----------------------------------------------------------------------------
class NanoVllm:
    """Handle on the child. Constructing it starts the child and returns at once (nano-vllm loads,
    compiles and captures graphs while the caller builds its own engines); ready() waits for that,
    run() times one case, close() ends the child."""

    def __init__(self, job: dict, path: Path, log: Path, use_shim: bool) -> None:
        self.job, self.log_path = job, log
        paths = [str(path)] + ([str(SHIM)] if use_shim else [])
        env = {**os.environ, **NO_MULTICAST}
        env["PYTHONPATH"] = os.pathsep.join(paths + [env.get("PYTHONPATH", "")])
        self._log = log.open("w")
        # its own session: a kill takes the TP workers and compile workers it started along
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.peer_nanovllm", "--serve", json.dumps(job)],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            start_new_session=True,
        )
        self.info: dict = {}

    def ready(self, timeout: float) -> dict:
        self.info = self._reply(timeout)
        return self.info

    def run(self, case: dict, timeout: float) -> dict:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps({"op": "run", "case": case}) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise self._failed(f"cannot write to the child ({exc})") from None
        return self._reply(timeout)

    def close(self) -> None:
        """Ask nano-vllm to exit (it ends its TP workers), then kill whatever is left."""
        with contextlib.suppress(Exception):
            if self.proc.poll() is None and self.proc.stdin is not None:
                self.proc.stdin.write(json.dumps({"op": "exit"}) + "\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=30)
        self._kill()
        self._log.close()

    def _reply(self, timeout: float) -> dict:
        out = self.proc.stdout
        assert out is not None
        ready, _, _ = select.select([out], [], [], max(0.0, timeout))
        line = out.readline() if ready else ""
        if not ready:
            raise self._failed(f"no answer within {timeout:.0f} s: killed")
        if not line:
            raise self._failed("the child exited")
        reply = json.loads(line)
        if "error" in reply:
            raise PeerError(reply["error"])
        return reply

    def _failed(self, what: str) -> PeerError:
        self._kill()
        rc = self.proc.poll()
        tail = self.log_path.read_text(errors="replace")[-20000:]
        return PeerError(f"nano-vllm child: {what} (exit {rc}); {last_error_line(tail)}")

    def _kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)


# -- the child -------------------------------------------------------------------------------------
class StubTokenizer:
    """What nano-vllm asks of a tokenizer when prompts are token ids: an eos id and decode."""

    def __init__(self, eos_token_id: int) -> None:
        self.eos_token_id = eos_token_id

    def decode(self, token_ids: list[int]) -> str:
        return ""


def stub_tokenizer(eos_token_id: int) -> None:
    """nano-vllm's LLMEngine calls AutoTokenizer.from_pretrained(model dir); random weights come
    with no tokenizer files, so it gets the stub (the only name replaced, and only in this
    process)."""
    import nanovllm.engine.llm_engine as engine_module

    class StubAutoTokenizer:
        @staticmethod
        def from_pretrained(*args: Any, **kwargs: Any) -> StubTokenizer:
            return StubTokenizer(eos_token_id)

    engine_module.AutoTokenizer = StubAutoTokenizer


def run_case(llm: Any, case: dict) -> dict:
    """One case, timed inside this process: `generate` when every request goes at once (the
    write-up), else a closed loop over nano-vllm's own add_request / step keeping `streams` in
    flight (the loop engine.driver.drive runs for bubblelab)."""
    import torch
    from nanovllm import SamplingParams

    params = [
        SamplingParams(temperature=case["temperature"], max_tokens=n, ignore_eos=True)
        for n in case["max_tokens"]
    ]
    pending = list(zip(case["prompts"], params, strict=True))
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    sync()
    t = time.perf_counter()
    if case["streams"] >= len(pending):
        outputs = llm.generate(case["prompts"], params, use_tqdm=False)
        generated = sum(len(o["token_ids"]) for o in outputs)
    else:
        generated = active = 0
        while pending or not llm.is_finished():
            while pending and active < case["streams"]:
                llm.add_request(*pending.pop(0))
                active += 1
            finished, _ = llm.step()
            active -= len(finished)
            generated += sum(len(ids) for _, ids in finished)
    sync()
    return {"wall_s": time.perf_counter() - t, "generated_tokens": generated}


def serve(job: dict) -> None:
    """The child: load nano-vllm, answer "ready", then one reply line per command until "exit"."""
    replies: IO[str] = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # nano-vllm's and torch's prints go to the log, never into the replies

    def reply(obj: dict) -> None:
        replies.write(json.dumps(obj) + "\n")
        replies.flush()

    try:
        t = time.perf_counter()
        import nanovllm
        from nanovllm import LLM

        stub_tokenizer(job["eos_token_id"])
        if job["tensor_parallel"] > 1:
            drop_stale_shm()
        else:
            own_rendezvous_port()
        llm = LLM(
            job["ckpt"],
            enforce_eager=False,
            tensor_parallel_size=job["tensor_parallel"],
            gpu_memory_utilization=job["gpu_memory_utilization"],
        )
        atexit.unregister(llm.exit)  # it is called once, below; a second call fails at exit
        reply({"ready": True, "init_s": time.perf_counter() - t, **child_facts(nanovllm, llm)})
    except Exception as exc:  # noqa: BLE001 - the parent records why, in one line
        traceback.print_exc()
        reply({"error": f"{type(exc).__name__}: {first_line(exc)}"})
        return
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["op"] == "exit":
            break
        try:
            reply(run_case(llm, cmd["case"]))
        except Exception as exc:  # noqa: BLE001
            traceback.print_exc()
            reply({"error": f"{type(exc).__name__}: {first_line(exc)}"})
    llm.exit()


def child_facts(nanovllm: Any, llm: Any) -> dict:
    """Which nano-vllm and flash_attn this child really imported, and the KV pool it sized."""
    fa = sys.modules.get("flash_attn")
    backend = getattr(fa, "backend", None)
    config = getattr(getattr(llm, "model_runner", None), "config", None)
    return {
        "nanovllm_file": nanovllm.__file__,
        "flash_attn_file": getattr(fa, "__file__", None),
        "flash_attn_backend": backend() if callable(backend) else None,
        "num_kvcache_blocks": getattr(config, "num_kvcache_blocks", None),
    }


def own_rendezvous_port() -> None:
    """nano-vllm joins its process group at a fixed tcp://localhost:2333, even alone. A TP-1 child
    holds that port for its life, so a TP-2 child of the same comparison failed to start
    (EADDRINUSE). Alone it needs no partner: its group is made at a free port instead, and the TP-2
    child keeps 2333 for its ranks. Only the address changes, nothing nano-vllm computes."""
    import socket

    import torch.distributed as dist

    original = dist.init_process_group

    def init_process_group(backend: Any = None, init_method: Any = None, *args, **kwargs):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        return original(backend, f"tcp://localhost:{port}", *args, **kwargs)

    dist.init_process_group = init_process_group


def drop_stale_shm() -> None:
    """At TP > 1 nano-vllm creates shared memory named "nanovllm"; a run killed earlier leaves it
    behind and the next create fails. Only that fixed name is touched."""
    from multiprocessing.shared_memory import SharedMemory

    with contextlib.suppress(FileNotFoundError):
        stale = SharedMemory(name="nanovllm")
        stale.close()
        stale.unlink()


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--serve":
        serve(json.loads(sys.argv[2]))
