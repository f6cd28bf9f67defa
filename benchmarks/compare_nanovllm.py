"""compare_engines, part 3: nano-vllm (PyPI nano-vllm-fork) on our weights, in a child process of
its own.

nano-vllm needs flash-attn's FA2 API: on the GPU machine that is tools/gpu_machine/flash_attn_shim
over flash-attn-4. The child (`python -m benchmarks.compare_nanovllm --nano-worker JOB`) keeps
nano-vllm's torch.distributed set-up, default device/dtype and compiler settings out of the harness,
and lets a hang be killed. Run alone, nano-vllm without the other engines:

    python -m benchmarks.compare_nanovllm --out $OUT    # nanovllm.json: runs and what did not run
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

import torch

from benchmarks.compare_common import (
    Clock,
    Sweep,
    first_line,
    last_error_line,
    not_run,
    progress,
    sync,
)
from bubblelab.engine.attention.flash_backend import fa4_entry
from bubblelab.engine.export import to_hf
from bubblelab.engine.loader import LoadedModel, load_model

ROOT = Path(__file__).resolve().parents[1]
# `flash_attn` with the FA2 API over flash-attn-4, first on the child's path for nano-vllm
SHIM = ROOT / "tools" / "gpu_machine" / "flash_attn_shim"


def nano_vllm_status() -> str | None:
    """None when nano-vllm can run here, else "not run: <why>". It needs nanovllm installed and
    FA2's API, which the child gets from the shim over flash-attn-4; the shim's SDPA fallback cannot
    be CUDA-graph captured, so flash-attn-4 itself must import. No tokenizer files are needed (the
    harness passes a tokenizer object)."""
    if importlib.util.find_spec("nanovllm") is None:
        return "not run: cannot import nanovllm (nano-vllm-fork is not installed)"
    if fa4_entry() is None:
        return (
            "not run: flash-attn-4 (`flash_attn.cute`) does not import; nano-vllm runs on FA2's "
            "API through tools/gpu_machine/flash_attn_shim over it"
        )
    return None


def patch_nanovllm_rope() -> None:
    """nano-vllm's cached get_rope asserts rope_scaling is None; transformers 5 reports the default
    rope parameters there as a dict (unhashable too): map that dict back to None."""
    import nanovllm.models.qwen3 as nq

    orig_get_rope = nq.get_rope

    def get_rope(*args, rope_scaling=None, **kw):
        if isinstance(rope_scaling, dict) and rope_scaling.get("rope_type", "default") == "default":
            rope_scaling = None
        return orig_get_rope(*args, rope_scaling=rope_scaling, **kw)

    nq.get_rope = get_rope


def write_hf_checkpoint(loaded: LoadedModel, directory: Path) -> Path:
    """config.json + model.safetensors of our seeded random weights (engine.export.to_hf), for
    nano-vllm."""
    from safetensors.torch import save_file

    raw, state = to_hf(loaded)
    directory.mkdir(parents=True, exist_ok=True)
    # a copy gives every split view its own storage (safetensors refuses shared ones)
    save_file(
        {n: t.detach().to("cpu", copy=True).contiguous() for n, t in state.items()},
        str(directory / "model.safetensors"),
    )
    (directory / "config.json").write_text(json.dumps(raw))
    return directory


def bench_nano_vllm(
    loaded: LoadedModel, preset: str, sweep: Sweep, clock: Clock, result: dict, work_dir: Path
) -> None:
    """nano-vllm on this preset in a child process (its own torch.distributed group, default device
    and dtype, dynamo settings; a hang is killed at the deadline). Rows land in result["runs"],
    failures in not_run."""
    work_dir = work_dir.resolve()  # the child runs in ROOT
    rows_file = work_dir / f"nanovllm-{preset}.jsonl"
    rows_file.unlink(missing_ok=True)
    try:
        if clock.elapsed() > sweep.deadline_s:
            raise TimeoutError(f"past the {sweep.deadline_s:.0f} s deadline (--deadline-s)")
        t = time.perf_counter()
        ckpt = write_hf_checkpoint(loaded, work_dir / f"ckpt-{preset}")
        clock.log(f"{preset} nano-vllm: checkpoint written in {time.perf_counter() - t:.1f} s")
        job = {
            "ckpt": str(ckpt),
            "preset": preset,
            "streams": sweep.streams,
            "L": sweep.L,
            "prompt_len": sweep.prompt_len,
            "vocab_size": loaded.config.vocab_size,
            "rows_file": str(rows_file),
            "stop_at": time.time() + min(1e7, max(0.0, sweep.deadline_s - clock.elapsed())),
        }
        # the child stops starting stream counts at the deadline; the kill comes 30 s later (a hang,
        # a slow init)
        timeout = min(86400.0, max(1.0, sweep.deadline_s - clock.elapsed() + 30.0))
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(SHIM), os.environ.get("PYTHONPATH", "")]),
        }
        # Output to a file, not pipes (compile workers it forks could hold a pipe open), and its own
        # process group, so a timeout kills the child and whatever it started.
        log = work_dir / f"nanovllm-{preset}.log"
        with log.open("w") as log_f:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "benchmarks.compare_nanovllm",
                    "--nano-worker",
                    json.dumps(job),
                ],
                cwd=ROOT,  # where `-m benchmarks...` finds the package
                env=env,
                stdout=log_f,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            rc: int | str
            try:
                rc = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                rc = "timeout"
            with contextlib.suppress(ProcessLookupError, PermissionError):
                # the child's group: its leftovers (or it, on timeout)
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        tail = log.read_text(errors="replace")[-4000:]
        for line in tail.splitlines():
            if line.startswith("[nano-vllm]"):
                clock.log(f"{preset} {line}")
        rows = (
            [json.loads(line) for line in rows_file.read_text().splitlines()]
            if rows_file.exists()
            else []
        )
        result["runs"] += [r for r in rows if "engine" in r]
        errors = [r["error"] for r in rows if "error" in r]
        if rc != 0 or errors:
            reason = (
                errors[0]
                if errors
                else (
                    f"child process killed after {timeout:.0f} s"
                    if rc == "timeout"
                    else f"child exited with {rc}: {last_error_line(tail)}"
                )
            )
            if rc != 0 and not errors:
                print(tail, flush=True)
            raise RuntimeError(reason)
    except Exception as exc:  # noqa: BLE001
        reason = (
            f"{type(exc).__name__}: {first_line(exc)}"
            if not isinstance(exc, RuntimeError)
            else first_line(exc)
        )
        result["not_run"].append(not_run("nano-vllm", preset, reason))
        clock.log(f"{preset} nano-vllm not run: {reason}")
    finally:
        import shutil

        shutil.rmtree(work_dir / f"ckpt-{preset}", ignore_errors=True)


def nano_worker(job: dict) -> None:
    """Child process: nano-vllm LLM.generate per stream count; one JSON line per row (or error) to
    rows_file."""
    from types import SimpleNamespace

    rows_file = Path(job["rows_file"])

    def emit(obj: dict) -> None:
        with rows_file.open("a") as f:
            f.write(json.dumps(obj) + "\n")

    try:
        from nanovllm import LLM, SamplingParams

        patch_nanovllm_rope()
        streams_list, L, prompt_len = job["streams"], round(job["L"]), job["prompt_len"]
        max_seqs = max(streams_list)
        max_model_len = prompt_len + L + 16
        t = time.perf_counter()
        llm = LLM(
            job["ckpt"],
            tokenizer=SimpleNamespace(eos_token_id=-1, decode=lambda ids: ""),
            enforce_eager=False,
            max_model_len=max_model_len,
            max_num_batched_tokens=max(4096, max_seqs * prompt_len, max_model_len),
            max_num_seqs=max_seqs,
            gpu_memory_utilization=0.3,
        )
        atexit.unregister(llm.exit)
        print(
            f"[nano-vllm] init (load, compile, graphs) {time.perf_counter() - t:.1f} s", flush=True
        )
        # Sampled (nano-vllm refuses temperature 0); ignore_eos fixes the length, so the cost is
        # greedy's.
        params, first = (
            SamplingParams(temperature=1.0, max_tokens=n, ignore_eos=True) for n in (L, 1)
        )
        for streams in streams_list:
            if time.time() > job["stop_at"]:
                emit(
                    {"error": f"stopped before {streams} streams: past the deadline (--deadline-s)"}
                )
                break
            gen = torch.Generator().manual_seed(streams)
            prompts = torch.randint(
                0, job["vocab_size"], (streams, prompt_len), generator=gen
            ).tolist()
            llm.generate(prompts, params, use_tqdm=False)  # warm-up
            row = {
                "engine": "nano-vllm",
                "attention": "flash-attn-4 (shim)",
                "preset": job["preset"],
                "streams": streams,
                "repeat": 0,
            }
            timings = []
            for p in (first, params):
                sync(torch.device("cuda" if torch.cuda.is_available() else "cpu"))
                t = time.perf_counter()
                outs = llm.generate(prompts, p, use_tqdm=False)
                sync(torch.device("cuda" if torch.cuda.is_available() else "cpu"))
                timings.append(time.perf_counter() - t)
            prefill_s, wall = timings
            generated = sum(len(o["token_ids"]) for o in outs)
            decode_s = wall - prefill_s
            # the first token of each row comes from the prefill
            decode_tokens = generated - streams
            ok = decode_s > 0 and decode_tokens > 0
            row.update(
                {
                    "decode_tokens_per_s": decode_tokens / decode_s if ok else None,
                    "step_ms": 1e3 * decode_s / (L - 1) if ok and L > 1 else None,
                    "forward_ms": None,
                    "gpu_busy": None,
                    "prefill_ms": 1e3 * prefill_s,
                    "e2e_tokens_per_s": generated / wall,
                    "wall_s": wall,
                    "generated_tokens": generated,
                    "mean_output_len": generated / streams,
                }
            )
            emit(row)
            print(f"[nano-vllm] {progress(row)}", flush=True)
        llm.exit()
    except Exception as exc:  # noqa: BLE001
        traceback.print_exc()
        emit({"error": f"{type(exc).__name__}: {first_line(exc)}"})


def main(argv: list[str] | None = None) -> dict:
    """nano-vllm alone on our seeded random weights (compare_engines runs it beside the other
    engines)."""
    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--presets", default="qwen3-0.6b,qwen3-4b")
    ap.add_argument("--streams", default="1,8,32,128")
    ap.add_argument("--L", type=float, default=110.0, help="output length")
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument(
        "--device", default="cuda", choices=("cuda", "cpu"), help="where our weights are made"
    )
    ap.add_argument("--deadline-s", type=float, default=480.0)
    ap.add_argument("--out", type=Path, required=True, help="directory for nanovllm.json")
    a = ap.parse_args(argv)
    sweep = Sweep(
        presets=a.presets.split(","),
        streams=sorted(int(s) for s in a.streams.split(",")),
        repeats=1,
        requests_per_stream=1,
        hf_repeats=0,
        L=a.L,
        prompt_len=a.prompt_len,
        device=a.device,
        hf_compile=False,
        deadline_s=a.deadline_s,
    )
    a.out.mkdir(parents=True, exist_ok=True)
    clock = Clock()
    status = nano_vllm_status()
    result: dict = {
        "runs": [],
        "not_run": [] if status is None else [not_run("nano-vllm", None, status)],
    }
    for preset in sweep.presets if status is None else []:
        loaded = load_model(preset, dtype=sweep.dtype, device=sweep.device, seed=0)
        bench_nano_vllm(loaded, preset, sweep, clock, result, a.out / "nanovllm-work")
    (a.out / "nanovllm.json").write_text(json.dumps(result, indent=1))
    clock.log(f"wrote {a.out}/nanovllm.json")
    return result


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--nano-worker":
        nano_worker(json.loads(sys.argv[2]))
    else:
        main()
