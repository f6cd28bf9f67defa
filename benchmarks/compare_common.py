"""What the compare_engines harness's parts share: the sweep, the progress clock, small helpers."""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass

import torch

from bubblelab.engine.config import default_dtype

METRICS = (
    "decode_tokens_per_s",
    "step_ms",
    "forward_ms",
    "gpu_busy",
    "prefill_ms",
    "e2e_tokens_per_s",
    "wall_s",
)


@dataclass
class Sweep:
    presets: list[str]
    streams: list[int]
    repeats: int  # bubblelab runs per (depth, streams)
    # bubblelab requests per run = this x streams (2: ~2L steps at full batch)
    requests_per_stream: int
    # generate pairs (t(1), t(N)) per (variant, streams): HF is slow, its spread small
    hf_repeats: int
    L: float  # mean output length
    prompt_len: int
    device: str
    hf_compile: bool
    backends: tuple[str, ...] = ("triton",)  # bubblelab attention backends; the first: the default
    block_size: int = 16  # bubblelab KV page size (raised to a backend's block_size_multiple)
    deadline_s: float = float("inf")  # no new unit of work starts after this many seconds

    @property
    def dtype(self) -> str:
        return default_dtype(self.device)


class Clock:
    """Progress lines with the seconds since the start, flushed (the lead watches them on the
    device)."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def log(self, msg: str) -> None:
        print(f"[{self.elapsed():6.1f}s] {msg}", flush=True)


def not_run(engine: str, preset: str | None, reason: str) -> dict:
    return {"engine": engine, "preset": preset, "reason": reason}


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else ""


def last_error_line(text: str) -> str:
    """The last line that looks like an exception (`Name: message`) of a child's output, else its
    last line."""
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    for ln in reversed(lines):
        if (
            ln
            and not ln.startswith((" ", "\t"))
            and ":" in ln
            and ln.split(":")[0].replace(".", "").isidentifier()
        ):
            return ln[:300]
    return lines[-1][:300] if lines else "(no output)"


def free_memory(device: str) -> None:
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def progress(row: dict) -> str:
    busy = f", busy {100 * row['gpu_busy']:.0f}%" if row.get("gpu_busy") is not None else ""

    def num(key: str, fmt: str) -> str:
        return "-" if row.get(key) is None else format(row[key], fmt)

    return (
        f"{row['preset']} {row['engine']} streams={row['streams']} repeat={row['repeat']}: "
        f"{num('decode_tokens_per_s', '.0f')} decode tok/s, step {num('step_ms', '.3f')} ms{busy}, "
        f"{num('e2e_tokens_per_s', '.0f')} e2e tok/s"
    )
