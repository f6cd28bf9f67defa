"""compare_engines, part 2: Hugging Face transformers `generate` (static cache, eager or
torch.compile'd) on our weights, with a CUDA event at each step's logits. Run alone, one such
`generate` and what it produced:

    python -m benchmarks.compare_hf --preset qwen3-0.6b --streams 8 --out hf.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from transformers import (
    GenerationConfig,
    GenerationMixin,
    LogitsProcessor,
    LogitsProcessorList,
    PreTrainedModel,
)

from benchmarks.compare_common import Clock, Sweep, not_run, progress, sync
from bubblelab.core.files import write_atomic
from bubblelab.core.steady import WARMUP_STEPS
from bubblelab.engine.config import ModelConfig, default_dtype
from bubblelab.engine.export import hf_causal_lm
from bubblelab.engine.loader import load_model
from bubblelab.runs.workload import WorkloadSpec, make_requests


def bench_hf(
    model: PreTrainedModel,
    cfg: ModelConfig,
    name: str,
    preset: str,
    sweep: Sweep,
    clock: Clock,
    deadline_s: float = float("inf"),
) -> tuple[list[dict], list[dict]]:
    """Rows and failures of one variant (a failure is data: the error is recorded and the sweep goes
    on). A batch size is started only before `deadline_s` since the start (compiling one takes a
    minute)."""
    compiled = name == "hf-static-compiled"
    rows: list[dict] = []
    for streams in sweep.streams:
        if clock.elapsed() > deadline_s:
            return rows, [
                not_run(
                    name,
                    preset,
                    f"not run from {streams} streams on: past the {deadline_s:.0f} s "
                    "time budget (--budget-s)",
                )
            ]
        try:
            rows += hf_runs(model, cfg, name, compiled, preset, streams, sweep, clock)
        except Exception as exc:  # a compile failure is a result, not a crash
            traceback.print_exc()
            first_line = str(exc).splitlines()[0] if str(exc) else ""
            torch._dynamo.reset()
            return rows, [
                not_run(
                    name, preset, f"failed at {streams} streams: {type(exc).__name__}: {first_line}"
                )
            ]
    return rows, []


def hf_runs(
    model: PreTrainedModel,
    cfg: ModelConfig,
    name: str,
    compiled: bool,
    preset: str,
    streams: int,
    sweep: Sweep,
    clock: Clock,
) -> list[dict]:
    new_tokens = round(sweep.L)
    spec = WorkloadSpec(streams=streams, requests=streams, prompt_len=sweep.prompt_len)
    prompts = torch.tensor(
        [r.prompt_ids for r in make_requests(spec, cfg.vocab_size)], device=sweep.device
    )
    # Compiled: the full length, as the static cache's length is part of the compiled graph; eager:
    # just warm.
    warm = hf_generate(
        model, cfg, prompts, new_tokens if compiled else min(new_tokens, 8), compiled
    )
    clock.log(f"{preset} {name} streams={streams}: warm-up generate {warm.seconds:.1f} s")
    rows = []
    for repeat in range(sweep.hf_repeats):
        prefill_only = hf_generate(model, cfg, prompts, 1, compiled)
        run = hf_generate(model, cfg, prompts, new_tokens, compiled)
        decode = run.marks_ms[1:]  # after the prefill: one period per decode step
        # as bubblelab's steady state, the first steps skipped
        steady = decode[WARMUP_STEPS:] or decode
        generated = (run.ids.shape[1] - prompts.shape[1]) * streams
        row = {
            "engine": name,
            "preset": preset,
            "streams": streams,
            "repeat": repeat,
            "decode_tokens_per_s": 1e3 * streams * len(steady) / sum(steady),
            "step_ms": float(np.median(steady)),
            "forward_ms": None,
            "gpu_busy": None,
            "prefill_ms": run.marks_ms[0],
            "e2e_tokens_per_s": generated / run.seconds,
            "wall_s": run.seconds,
            # the brief's estimate: per-call set-up (cache allocation, graph re-recording) lands in
            # the steps
            "step_ms_wall": 1e3 * (run.seconds - prefill_only.seconds) / (new_tokens - 1),
            "generated_tokens": generated,
            "mean_output_len": generated / streams,
            "warmup_s": warm.seconds,
        }
        rows.append(row)
        clock.log(progress(row))
    return rows


@dataclass
class Generated:
    ids: torch.Tensor
    seconds: float  # host wall time of the generate call
    # device time from the call's start to the first logits, then between logits
    marks_ms: list[float]


class StepMarks(LogitsProcessor):
    """Marks each step's logits on the device stream (CUDA events; the host clock on CPU, where
    every op runs before the host moves on), so per-step periods exclude generate's per-call
    set-up."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.marks: list = []
        self.mark()

    def mark(self) -> None:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.marks.append(event)
        else:
            self.marks.append(time.perf_counter())

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        self.mark()
        return scores

    def intervals_ms(self) -> list[float]:
        if self.cuda:
            return [a.elapsed_time(b) for a, b in itertools.pairwise(self.marks)]
        return [1e3 * (b - a) for a, b in itertools.pairwise(self.marks)]


def hf_generate(
    model: PreTrainedModel, cfg: ModelConfig, prompts: torch.Tensor, new_tokens: int, compiled: bool
) -> Generated:
    """Greedy, static cache, exactly `new_tokens` per row (EOS masked until then)."""
    assert isinstance(model, GenerationMixin), type(model)  # every *ForCausalLM generates
    eos = list(cfg.eos_token_ids)
    config = GenerationConfig(
        do_sample=False,
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        cache_implementation="static",
        disable_compile=not compiled,
        eos_token_id=eos or None,
        pad_token_id=eos[0] if eos else 0,
    )
    sync(prompts.device)
    t0 = time.perf_counter()
    marks = StepMarks(prompts.device)
    # generate's `self` is typed as transformers' GenerativePreTrainedModel protocol, which declares
    # attributes (encoder, hf_device_map, ...) PreTrainedModel does not: an upstream typing gap.
    ids = model.generate(  # type: ignore[misc, unused-ignore]  # no_grad inside
        prompts,
        attention_mask=torch.ones_like(prompts),
        generation_config=config,
        logits_processor=LogitsProcessorList([marks]),
    )
    sync(prompts.device)
    assert isinstance(ids, torch.Tensor)  # no return_dict_in_generate: the ids alone
    return Generated(ids, time.perf_counter() - t0, marks.intervals_ms())


def main(argv: list[str] | None = None) -> dict:
    """One greedy `generate` with the harness's settings on our seeded random weights: prompts,
    tokens, wall time and step marks as JSON."""
    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--preset", default="qwen3-0.6b")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random weights")
    ap.add_argument("--streams", type=int, default=1, help="batch size")
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=110)
    ap.add_argument("--compiled", action="store_true", help="generate's torch.compile path")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--out", type=Path, required=True, help="the JSON file")
    a = ap.parse_args(argv)
    loaded = load_model(a.preset, dtype=default_dtype(a.device), device=a.device, seed=a.seed)
    spec = WorkloadSpec(streams=a.streams, requests=a.streams, prompt_len=a.prompt_len)
    prompts = torch.tensor(
        [r.prompt_ids for r in make_requests(spec, loaded.config.vocab_size)], device=a.device
    )
    run = hf_generate(hf_causal_lm(loaded), loaded.config, prompts, a.new_tokens, a.compiled)
    result = {
        "preset": a.preset,
        "seed": a.seed,
        "prompts": prompts.tolist(),
        "ids": run.ids.tolist(),
        "seconds": run.seconds,
        "marks_ms": run.marks_ms,
    }
    write_atomic(a.out, json.dumps(result))
    return result


if __name__ == "__main__":
    main()
