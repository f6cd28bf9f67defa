"""compare_nanovllm's workloads, the order engines take turns in, the device's roofline numbers.

(a) the nano-vllm write-up's workload: 128 prompts of 20-80 random tokens, max_tokens 64,
    temperature 0.6, ignore_eos, all handed over at once (nano-vllm's `generate`);
(b) decode at N streams: a closed loop keeping N requests in flight until 2 x N are done, 32-token
    prompts, output lengths uniform on [L/2, 3L/2] (bubblelab.runs.workload, as compare_engines),
    temperature 0.6.
Every engine gets the very same token ids and lengths.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import torch

from bubblelab.costmodel.roofline import run_floor
from bubblelab.engine.loader import LoadedModel
from bubblelab.runs.workload import WorkloadSpec, make_requests

WRITEUP_PROMPTS = 128
WRITEUP_PROMPT_LENS = (20, 80)  # inclusive
WRITEUP_MAX_TOKENS = 64
TEMPERATURE = 0.6
WARMUP = -1  # the repeat number of the warm-up round (not summarised)


@dataclass(frozen=True)
class Case:
    """One workload every engine runs: the same prompts, lengths and sampling settings."""

    part: str  # "a" (the write-up) or "b" (decode at `streams`)
    name: str
    streams: int  # requests in flight at most; (a) hands everything over at once
    prompts: list[list[int]]
    max_tokens: list[int]
    temperature: float = TEMPERATURE

    def to_json(self) -> dict:
        return asdict(self)


def _token_range(vocab_size: int) -> tuple[int, int]:
    """Prompt token ids clear of special tokens, as engine.workload.make_requests draws them."""
    return min(100, vocab_size // 4), max(101, vocab_size - 1000)


def writeup_case(vocab_size: int, seed: int) -> Case:
    """(a): 128 prompts of 20-80 random tokens, 64 tokens each."""
    rng = np.random.default_rng(seed)
    lo, hi = WRITEUP_PROMPT_LENS
    low, high = _token_range(vocab_size)
    lengths = rng.integers(lo, hi + 1, WRITEUP_PROMPTS)
    prompts = [rng.integers(low, high, n).tolist() for n in lengths]
    return Case("a", "writeup", len(prompts), prompts, [WRITEUP_MAX_TOKENS] * len(prompts))


def decode_case(
    vocab_size: int, streams: int, L: float, prompt_len: int, requests_per_stream: int, seed: int
) -> Case:
    """(b): a closed loop of requests_per_stream x streams requests with `streams` in flight."""
    spec = WorkloadSpec(
        streams=streams,
        requests=requests_per_stream * streams,
        output_len_mean=L,
        prompt_len=prompt_len,
        temperature=TEMPERATURE,
        seed=seed,
    )
    requests = make_requests(spec, vocab_size)
    return Case(
        "b",
        f"decode-{streams}",
        streams,
        [r.prompt_ids for r in requests],
        [r.params.max_tokens for r in requests],
    )


def schedule(
    cases: Sequence[Case], engines: Sequence[str], repeats: int
) -> Iterator[tuple[int, Case, str]]:
    """(repeat, case, engine) in run order: a warm-up round (repeat WARMUP), then each repeat runs
    every case with the engines taking turns, A B C A B C, so drift over the run reaches every
    engine alike."""
    for repeat in [WARMUP, *range(repeats)]:
        for case in cases:
            for engine in engines:
                yield repeat, case, engine


def case_facts(case: Case) -> dict:
    """What the report says of a case: sizes and token counts."""
    return {
        "part": case.part,
        "streams": case.streams,
        "requests": len(case.prompts),
        "prompt_tokens": sum(len(p) for p in case.prompts),
        "prompt_len_min": min(len(p) for p in case.prompts),
        "prompt_len_max": max(len(p) for p in case.prompts),
        "output_tokens": sum(case.max_tokens),
        "temperature": case.temperature,
    }


# -- the device's roofline numbers -----------------------------------------------------------------
def _seconds_per_call(fn: Callable[[], object], device: torch.device, iters: int) -> float:
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    fn()
    sync()
    t = time.perf_counter()
    for _ in range(iters):
        fn()
    sync()
    return (time.perf_counter() - t) / iters


def _copy_seconds(nbytes: int, device: torch.device) -> float:
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    return _seconds_per_call(lambda: dst.copy_(src), device, 10)


def measure_roofline(device: str, dtype: torch.dtype) -> dict:
    """Copy bandwidth (bytes read + written per second, device to device, as
    forward_kernels.copy_bandwidth measures it) and the matmul peak (FLOP/s of a large square matmul
    in `dtype`), measured once on this device (GPU 0 for CUDA). Smaller sizes on the CPU: the dry
    run checks the arithmetic, not the machine."""
    dev = torch.device(device)
    nbytes, n = (1 << 30, 8192) if dev.type == "cuda" else (64 << 20, 512)
    copy_s = _copy_seconds(nbytes, dev)
    a, b = (torch.randn(n, n, device=dev, dtype=dtype) for _ in range(2))
    matmul_s = _seconds_per_call(lambda: a @ b, dev, 10)
    return {
        "copy_bandwidth": 2 * nbytes / copy_s,
        "matmul_peak": 2 * n**3 / matmul_s,
        "copy_bytes": nbytes,
        "matmul_n": n,
        "matmul_dtype": str(dtype).removeprefix("torch."),
    }


def floor_facts(loaded: LoadedModel, case: Case, roof: dict, gpus: int) -> dict:
    """The case's roofline floor (costmodel.roofline) on `gpus` GPUs, with its parts."""
    itemsize = next(loaded.model.parameters()).element_size()
    f = run_floor(
        loaded.config,
        itemsize,
        [len(p) for p in case.prompts],
        case.max_tokens,
        case.streams,
        roof["matmul_peak"],
        roof["copy_bandwidth"],
        gpus,
    )
    return {
        "prefill_flops": f.prefill_flops,
        "decode_steps": f.decode_steps,
        "weight_bytes": f.weight_bytes,
        "gpus": gpus,
        "prefill_s": f.prefill_s,
        "decode_s": f.decode_s,
        "floor_s": f.seconds,
    }
