"""Warm-up before a timed run: every forward and sampling shape the run can reach, run once first.

A shape's first run is slow for reasons that have nothing to do with the run: the caching allocator
grows, a kernel is autotuned or JIT-compiled (torch.compile, FA4's CuTe kernels), cuBLAS picks an
algorithm. So before the timed region the engine runs, through its own loop, what the workload's
admission and its ends can produce:

- every prefill the admission can form: k prompts of the workload's length admitted together, for
  k from 1 to what fits in a step (the stream count, the batch rows, the token budget): requests
  finish and arrive one by one, so any k turns up;
- every decode batch from the stream count down to 1 row: requests of staggered lengths, so the
  batch shrinks by one row a step; any size the stagger missed gets a batch of its own.

A captured graph serves a range of sizes (its bucket), so those need one run per bucket; eager
shapes need each size. What an engine has run stays run (ModelRunner.shapes), so a later run of the
same engine warms only what is new to it: the first run of a sweep pays, its repeats do not. Every
run ends its warm-up with a few steps at full width (SETTLE_TOKENS a request).
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from ..core.pipeline import StepKind
from ..engine.handoff_probe import probe_handoff
from ..engine.llm_engine import LLMEngine
from ..engine.sampler import SamplingFlags
from ..engine.sampling_params import SamplingParams
from .workload import Request, WorkloadSpec

SETTLE_TOKENS = 4


def prefill_sizes(spec: WorkloadSpec, max_num_seqs: int, max_batched_tokens: int) -> range:
    """How many prompts of the workload one prefill step can hold: 1 up to the in-flight cap, the
    batch rows and the token budget (a prompt over budget is admitted alone)."""
    most = min(spec.streams, max_num_seqs, max(1, max_batched_tokens // spec.prompt_len))
    return range(1, most + 1)


def needed_shapes(engine: LLMEngine, spec: WorkloadSpec) -> set[tuple]:
    """The forward shapes a run of `spec` can reach on this engine."""
    c, runner, p = engine.config, engine.runner, spec.prompt_len
    prefills = {
        runner.forward_shape(StepKind.PREFILL, k, k * p, p)
        for k in prefill_sizes(spec, c.max_num_seqs, c.max_num_batched_tokens)
    }
    decodes = {
        runner.forward_shape(StepKind.DECODE, r, r)
        for r in range(1, min(spec.streams, c.max_num_seqs) + 1)
    }
    return prefills | decodes


def warm_up(engine: LLMEngine, spec: WorkloadSpec, requests: list[Request]) -> dict:
    """Run every shape of needed_shapes that the engine has not run yet, with the sampling
    parameters the workload's requests use. Returns what it ran (requests, steps, seconds) and the
    shapes still not run (none, unless a grammar ended requests before their batch formed)."""
    t0 = time.perf_counter()
    runner, c, p = engine.runner, engine.config, spec.prompt_len
    warm = _Batches(engine, spec, _templates(requests))
    for k in prefill_sizes(spec, c.max_num_seqs, c.max_num_batched_tokens):
        if runner.forward_shape(StepKind.PREFILL, k, k * p, p) not in runner.shapes:
            warm.run([1] * k)  # one token each: the prefill samples it and the request ends
    rows = min(spec.streams, c.max_num_seqs)
    decodes = {r: runner.forward_shape(StepKind.DECODE, r, r) for r in range(1, rows + 1)}
    if any(key not in runner.shapes for key in decodes.values()):
        room = max(1, c.max_model_len - p - 2)  # the longest request must fit its sequence
        warm.run([2 + min(i, room) for i in range(rows)])  # the batch loses a row a step
    for r, key in decodes.items():
        if key not in runner.shapes:
            warm.run([2] * r)  # one decode step of r rows
    # Every run, however warm the engine: a few steps at full width right before the timed region,
    # so its first step does not follow an idle host and GPU.
    warm.run([SETTLE_TOKENS] * rows)
    missing = sorted(map(str, needed_shapes(engine, spec) - runner.shapes))
    return {"warmup_requests": warm.requests, "warmup_steps": warm.steps,
            "warmup_shapes_s": time.perf_counter() - t0, "warmup_missing": missing}  # fmt: skip


def probe(engine: LLMEngine, spec: WorkloadSpec, requests: list[Request]) -> dict:
    """The hand-over probe (engine.handoff_probe) at the run's full batch, sampled as its first kind
    of request: the GPU's idle between two queued steps, which a depth-1 run cannot show and its
    forecast reads (costmodel.wholerun). Under tensor parallelism rank 0's idle, the workers
    replaying each probe step with it."""
    flags = SamplingFlags.of(_templates(requests)[:1])
    engine.runner.activate()
    rows = min(spec.streams, engine.config.max_num_seqs)
    return probe_handoff(engine.runner, rows, flags).summary()


def _templates(requests: list[Request]) -> list[SamplingParams]:
    """One SamplingParams per kind of request in the workload (temperature, top-k/p, constraint):
    sampling runs a graph or kernel per kind."""
    kinds: dict[tuple, SamplingParams] = {}
    for r in requests:
        p = r.params
        kinds.setdefault((p.temperature, p.top_k, p.top_p, p.constraint), p)
    return list(kinds.values())


class _Batches:
    """Warm-up requests run to their end, one batch at a time, once per kind of request."""

    def __init__(self, engine: LLMEngine, spec: WorkloadSpec, templates: list[SamplingParams]):
        self.engine, self.spec, self.templates = engine, spec, templates
        vocab = engine.loaded.config.vocab_size
        self.low, self.high = min(100, vocab // 4), max(101, vocab - 1000)  # as make_requests
        self.rng = np.random.default_rng(spec.seed + 7919)
        self.requests = self.steps = 0

    def run(self, max_tokens: list[int]) -> None:
        engine = self.engine
        longest = engine.config.max_model_len - self.spec.prompt_len
        for template in self.templates:
            # A constrained request needs its shortest output's tokens: every length moves up by
            # the same amount, so a staggered batch still loses one row a step.
            extra = engine.min_tokens(template) - 1
            batch = []
            for n in max_tokens:
                params = dataclasses.replace(
                    template, max_tokens=max(1, min(n + extra, longest)), ignore_eos=True,
                    seed=self.requests,
                )  # fmt: skip
                prompt = self.rng.integers(self.low, self.high, self.spec.prompt_len).tolist()
                batch.append((f"warm-{self.requests}", prompt, params))
                self.requests += 1
            engine.add_requests(batch)
            while engine.has_unfinished():
                for out in engine.step():
                    if out.finished:
                        engine.seqs.pop(out.request_id, None)
                self.steps += 1
