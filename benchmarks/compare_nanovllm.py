"""bubblelab (depth 1 and 2) against the original nano-vllm on the same seeded random weights.

(a) the nano-vllm write-up's workload end to end (Qwen3-4B shapes, 128 prompts of 20-80 random
    tokens, max_tokens 64, temperature 0.6, ignore_eos): wall time of nano-vllm's `generate` and of
    bubblelab's driver on the same requests;
(b) decode at 1/8/32/128 streams: a closed loop of 2 x streams requests, 32-token prompts, output
    lengths uniform on [L/2, 3L/2], the same requests for every engine.
A warm-up round first, then --repeats rounds in which the engines take turns (A B C A B C ...). Each
run is set against its roofline floor (costmodel.roofline: prefill FLOPs / matmul peak + decode
steps x weight bytes / copy bandwidth, both measured at the start). nano-vllm (source staged in
.peers/nano-vllm by tools/gpu_machine/stage_nanovllm.sh) runs in a child process of its own,
at each --tensor-parallel size (1,2: one child a size, started one after another); bubblelab runs
in this one on GPU 0, at the same sizes (a size > 1 adds worker processes on the next GPUs), so
every engine at every size takes turns in one run. Writes compare_nanovllm.{json,md,png} to --out;
see benchmarks/README.md.

    python -m benchmarks.compare_nanovllm --out $OUT              # H200, qwen3-4b: ~5 minutes
    python -m benchmarks.compare_nanovllm --out $OUT --quick      # ~3 minutes
    python -m benchmarks.compare_nanovllm --tensor-parallel 1,2 --out $OUT  # two GPUs, TP 1 and 2
    python -m benchmarks.compare_nanovllm --device cpu --preset tiny-qwen3 --streams 1,2 --L 8 \
        --out /tmp/peer                                           # dry run: bubblelab only
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch
import transformers

from benchmarks import peer_bubblelab
from benchmarks.compare_common import Clock, first_line, free_memory, not_run
from benchmarks.peer_nanovllm import (
    NANOVLLM,
    SHIM,
    NanoVllm,
    PeerError,
    peer_status,
    staged_commit,
    write_hf_checkpoint,
)
from benchmarks.peer_report import plot, summarise, write_markdown
from benchmarks.peer_workloads import (
    WARMUP,
    Case,
    case_facts,
    decode_case,
    floor_facts,
    measure_roofline,
    schedule,
    writeup_case,
)
from bubblelab.core.files import write_atomic
from bubblelab.costmodel.roofline import FORMULA
from bubblelab.engine.config import parse_dtype
from bubblelab.engine.loader import LoadedModel, load_model


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--out", type=Path, required=True, help="directory for the JSON, markdown, PNG")
    ap.add_argument("--preset", default="qwen3-4b", help="model shapes (seeded random weights)")
    ap.add_argument("--parts", default="a,b", help="a: the write-up's workload; b: decode sweep")
    ap.add_argument(
        "--repeats", type=int, default=None, help="measured rounds (default 6, quick 3)"
    )
    ap.add_argument("--streams", default="1,8,32,128", help="(b): streams in flight")
    ap.add_argument("--L", type=float, default=110.0, help="(b): mean output length")
    ap.add_argument("--prompt-len", type=int, default=32, help="(b): prompt tokens")
    ap.add_argument("--requests-per-stream", type=int, default=None, help="(b): default 2, quick 1")
    ap.add_argument("--quick", action="store_true", help="3 rounds, 1 x streams requests in (b)")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument(
        "--attention-backend", default=None, help="bubblelab's (default triton on CUDA, else torch)"
    )
    ap.add_argument(
        "--tensor-parallel",
        default="1",
        help="tensor-parallel sizes, e.g. 1,2: nano-vllm's tensor_parallel_size and bubblelab's, "
        "every engine at every size interleaved",
    )
    ap.add_argument(
        "--nanovllm-gpu-memory",
        type=float,
        default=0.45,
        help="nano-vllm's gpu_memory_utilization: it sizes its KV pool to this share of the GPU "
        "minus what is in use, bubblelab's engines included (they share GPU 0)",
    )
    ap.add_argument(
        "--nanovllm-gpu-memory-next",
        type=float,
        default=0.25,
        help="for each further nano-vllm child (the next --tensor-parallel size): this share of "
        "the GPU over what is in use on GPU 0 when it starts",
    )
    ap.add_argument("--nanovllm-path", type=Path, default=NANOVLLM, help="the staged source")
    ap.add_argument("--skip-nanovllm", action="store_true")
    ap.add_argument("--init-timeout-s", type=float, default=300.0, help="nano-vllm load+compile")
    ap.add_argument("--run-timeout-s", type=float, default=120.0, help="one nano-vllm case")
    ap.add_argument("--deadline-s", type=float, default=480.0, help="start no run after this")
    a = ap.parse_args(argv)
    a.repeats = a.repeats if a.repeats is not None else (3 if a.quick else 6)
    a.requests_per_stream = a.requests_per_stream or (1 if a.quick else 2)
    a.parts = [p for p in ("a", "b") if p in a.parts.split(",")]
    a.streams = sorted({int(s) for s in a.streams.split(",")})
    a.attention_backend = a.attention_backend or ("triton" if a.device == "cuda" else "torch")
    try:
        a.tensor_parallel = sorted({int(n) for n in str(a.tensor_parallel).split(",")})
    except ValueError:
        ap.error(f"--tensor-parallel takes sizes such as 1,2, not {a.tensor_parallel!r}")
    if a.repeats < 1 or not a.parts or min(a.tensor_parallel) < 1:
        ap.error("need --repeats >= 1, a part (a, b) and --tensor-parallel sizes >= 1")
    return a


def nano_label(tp: int) -> str:
    return f"nano-vllm (TP {tp})" if tp > 1 else "nano-vllm"


def bubblelab_label(tp: int, depth: int) -> str:
    return f"bubblelab-tp{tp}-d{depth}" if tp > 1 else f"bubblelab-d{depth}"


def build_cases(a: argparse.Namespace, vocab_size: int) -> list[Case]:
    cases = [writeup_case(vocab_size, seed=0)] if "a" in a.parts else []
    if "b" in a.parts:
        cases += [
            decode_case(vocab_size, s, a.L, a.prompt_len, a.requests_per_stream, seed=0)
            for s in a.streams
        ]
    return cases


def main(argv: list[str] | None = None) -> dict:
    a = parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    # `timeout` and the like end the harness with SIGTERM: unwind, so the child is ended too
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    clock = Clock()
    dtype = "bf16" if a.device == "cuda" else "fp32"
    roof = measure_roofline(a.device, parse_dtype(dtype))
    free_memory(a.device)  # nano-vllm sizes its KV pool from what is in use on the GPU
    loaded = load_model(
        a.preset, dtype=dtype, device=a.device, seed=0, attention_backend=a.attention_backend
    )
    cases = build_cases(a, loaded.config.vocab_size)
    status, attention = (
        ("not run: skipped (--skip-nanovllm)", "")
        if a.skip_nanovllm
        else peer_status(a.nanovllm_path, a.device, max(a.tensor_parallel))
    )
    result = describe(a, loaded, cases, roof, attention, status)
    nano = ", ".join(nano_label(tp) for tp in a.tensor_parallel)
    clock.log(
        f"{result['device']}: copy {roof['copy_bandwidth'] / 1e9:.0f} GB/s, matmul "
        f"{roof['matmul_peak'] / 1e12:.3g} TFLOP/s; {a.preset} loaded; {nano}: "
        f"{status or 'starting'}"
    )
    # the checkpoint (8 GB for qwen3-4b) outside --out, whose files travel back from the GPU machine
    ckpt = Path(tempfile.mkdtemp(prefix="bubblelab-nanovllm-"))
    peers: dict[int, NanoVllm] = {}
    engines: dict = {}
    try:
        first, *later = a.tensor_parallel
        if status is None:
            peers[first] = start_peer(loaded, a, ckpt, attention, clock, first)
        for tp in a.tensor_parallel:
            engines |= build_bubblelab(loaded, a, dtype, cases, result, clock, tp)
        runners: dict[str, tuple[Callable[[Case], dict], int]] = {}
        ready = first in peers and peer_ready(peers[first], a, result, clock, first)
        for tp in later if ready else []:
            # one child at a time: each sizes its KV pool from what is in use when it starts
            peers[tp] = start_peer(loaded, a, ckpt, attention, clock, tp)
            if not peer_ready(peers[tp], a, result, clock, tp):
                del peers[tp]
        for tp, peer in peers.items() if ready else []:
            runners[nano_label(tp)] = (partial(run_peer, peer, a.run_timeout_s), tp)
        for (tp, depth), engine in engines.items():
            run = partial(peer_bubblelab.run_case, engine, depth=depth)
            runners[bubblelab_label(tp, depth)] = (run, tp)
        for part in a.parts:
            run_part(part, [c for c in cases if c.part == part], runners, a, result, clock)
    finally:
        for peer in peers.values():
            peer.close()
        peer_bubblelab.close_engines(engines)
        shutil.rmtree(ckpt, ignore_errors=True)
        del loaded
        free_memory(a.device)
    markdown = save(result, a.out, clock, plot_too=True)
    print(markdown, flush=True)
    clock.log(f"wrote {a.out}/compare_nanovllm.{{json,md,png}}")
    return result


def describe(
    a: argparse.Namespace,
    loaded: LoadedModel,
    cases: list[Case],
    roof: dict,
    attention: str,
    status: str | None,
) -> dict:
    """The result's frame: versions, settings, the cases, each case's floor at 1 and at N GPUs."""
    backend = loaded.model.attn_backend
    impl = getattr(backend, "impl", None)
    return {
        "device": torch.cuda.get_device_name() if a.device == "cuda" else "cpu",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(a).items()},
        "dtype": "bf16" if a.device == "cuda" else "fp32",
        "bubblelab_attention": a.attention_backend + (f"({impl})" if impl else ""),
        "nanovllm": {
            "labels": {str(tp): nano_label(tp) for tp in a.tensor_parallel},
            "commit": staged_commit(a.nanovllm_path),
            "tensor_parallel": a.tensor_parallel,
            "attention": attention,
            "shim": str(SHIM),  # put first on its path when flash-attn-4 is what is installed
        },
        "roofline": {**roof, "formula": FORMULA},
        "cases": {c.name: case_facts(c) for c in cases},
        "floors": {
            c.name: {str(n): floor_facts(loaded, c, roof, n) for n in {1, *a.tensor_parallel}}
            for c in cases
        },
        "runs": [],
        "not_run": []
        if status is None
        else [not_run(nano_label(tp), a.preset, status) for tp in a.tensor_parallel],
    }


def build_bubblelab(
    loaded: LoadedModel,
    a: argparse.Namespace,
    dtype: str,
    cases: list[Case],
    result: dict,
    clock: Clock,
    tp: int,
) -> dict:
    """bubblelab's depth 1 and 2 engines at tensor parallel `tp`, {(tp, depth): engine}, or {}
    with the reason recorded (the others still run)."""
    try:
        engines = peer_bubblelab.build_engines(
            loaded, a.preset, a.device, dtype, a.attention_backend, cases, tp
        )
    except Exception as exc:  # noqa: BLE001
        traceback.print_exc()
        reason = f"engines failed to build: {type(exc).__name__}: {first_line(exc)}"
        result["not_run"].append(not_run(bubblelab_label(tp, 1)[:-3], a.preset, reason))
        return {}
    clock.log(f"bubblelab engines ready (tensor parallel {tp}, depth 1 and 2)")
    return {(tp, depth): engine for depth, engine in engines.items()}


def peer_ready(peer: NanoVllm, a: argparse.Namespace, result: dict, clock: Clock, tp: int) -> bool:
    """Wait for nano-vllm's child to finish loading; False, the reason recorded, if it does not."""
    nano = nano_label(tp)
    try:
        facts = peer.ready(a.init_timeout_s)
    except PeerError as exc:
        result["not_run"].append(not_run(nano, a.preset, f"init failed: {exc}"))
        clock.log(f"{nano} not run: {exc}")
        return False
    result["nanovllm"].update(facts)  # versions and paths, the same for every child
    result["nanovllm"].setdefault("init_s_by_tp", {})[str(tp)] = facts.get("init_s")
    clock.log(f"{nano} ready in {facts.get('init_s', float('nan')):.0f} s")
    return True


def run_peer(peer: NanoVllm, timeout_s: float, case: Case) -> dict:
    return peer.run(case.to_json(), timeout_s)


def start_peer(
    loaded: LoadedModel, a: argparse.Namespace, ckpt: Path, attention: str, clock: Clock, tp: int
) -> NanoVllm:
    """Write the checkpoint (once) and start nano-vllm's child at tensor parallel `tp`: the first
    loads while bubblelab builds engines; a later one is given --nanovllm-gpu-memory-next of the
    GPU over what is in use when it starts (nano-vllm sizes its KV pool from its share minus
    everything in use, the other children included)."""
    if not (ckpt / "config.json").is_file():
        t = time.perf_counter()
        write_hf_checkpoint(loaded, ckpt)
        clock.log(f"checkpoint written in {time.perf_counter() - t:.1f} s")
    share = a.nanovllm_gpu_memory
    if tp != a.tensor_parallel[0] and a.device == "cuda":
        free, total = torch.cuda.mem_get_info(0)
        share = min(0.95, (total - free) / total + a.nanovllm_gpu_memory_next)
    eos = loaded.config.eos_token_ids
    job = {
        "ckpt": str(ckpt.resolve()),
        "tensor_parallel": tp,
        "gpu_memory_utilization": share,
        "eos_token_id": eos[0] if eos else -1,
    }
    use_shim = attention.startswith("flash-attn-4")
    log = a.out / ("nanovllm.log" if tp == 1 else f"nanovllm-tp{tp}.log")
    return NanoVllm(job, a.nanovllm_path.resolve(), log, use_shim)


def run_part(
    part: str,
    cases: list[Case],
    runners: dict[str, tuple[Callable[[Case], dict], int]],
    a: argparse.Namespace,
    result: dict,
    clock: Clock,
) -> None:
    """The warm-up round, then the repeats, engines interleaved. An engine that fails is recorded
    once and left out of the rest; past --deadline-s nothing new starts."""
    for repeat, case, engine in schedule(cases, list(runners), a.repeats):
        if engine not in runners:
            continue
        if clock.elapsed() > a.deadline_s:
            why = f"({part}) stopped before {case.name}, repeat {repeat}: past --deadline-s"
            result["not_run"].append(not_run("all", a.preset, why))
            clock.log(why)
            return
        run, gpus = runners[engine]
        tag = "warm-up" if repeat == WARMUP else f"repeat {repeat}"
        try:
            timing = run(case)
        except Exception as exc:  # noqa: BLE001 - a failing engine is a result, the others go on
            if not isinstance(exc, PeerError):
                traceback.print_exc()
            reason = f"failed at ({part}) {case.name}, {tag}: {type(exc).__name__}: "
            result["not_run"].append(not_run(engine, a.preset, reason + first_line(exc)))
            clock.log(f"{engine} {reason}{first_line(exc)}")
            del runners[engine]
            continue
        floor_s = result["floors"][case.name][str(gpus)]["floor_s"]
        facts = result["cases"][case.name]
        row = {
            "seq": len(result["runs"]),
            "part": part,
            "case": case.name,
            "streams": case.streams,
            "engine": engine,
            "repeat": repeat,
            "gpus": gpus,
            **timing,
            "tokens_per_s": timing["generated_tokens"] / timing["wall_s"],
            "total_tokens_per_s": (facts["prompt_tokens"] + timing["generated_tokens"])
            / timing["wall_s"],
            "floor_s": floor_s,
            "over_floor": timing["wall_s"] / floor_s,
        }
        if timing["generated_tokens"] != facts["output_tokens"]:
            row["error"] = f"generated {timing['generated_tokens']} of {facts['output_tokens']}"
        result["runs"].append(row)
        save(result, a.out, clock)  # after every run: a harness killed at its limit keeps them
        clock.log(
            f"({part}) {case.name} {tag} {engine}: {row['wall_s']:.3f} s, "
            f"{row['tokens_per_s']:,.0f} tok/s, {row['over_floor']:.2f}x floor"
        )


def save(result: dict, out: Path, clock: Clock, plot_too: bool = False) -> str:
    """Summary, JSON and markdown (and the plot at the end), rewritten after every part so a run
    killed at its limit still leaves what it finished. Never raises: returns the markdown or ''."""
    try:
        result["summary"] = summarise(result)
        result["wall_s"] = clock.elapsed()
        write_atomic(out / "compare_nanovllm.json", json.dumps(result, indent=1, default=str))
        markdown = write_markdown(result, out / "compare_nanovllm.md")
        if plot_too:
            plot(result, out / "compare_nanovllm.png")
        return markdown
    except Exception as exc:  # noqa: BLE001
        traceback.print_exc()
        clock.log(f"writing the outputs failed: {type(exc).__name__}: {first_line(exc)}")
        return ""


if __name__ == "__main__":
    main()
