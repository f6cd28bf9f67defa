"""LLMEngine, the serving loop. A tick: launch step t+1, commit step t, finalize (sample) t+1.

`depth` (1 or 2) is the only difference between blocking and pipelined decoding: the Pipeline allows
at most `depth` steps in flight, and the same three phases run in the same code. At depth 1 a tick
becomes launch t, finalize t, commit t, because the step to commit is the one just launched.
"""

from __future__ import annotations

import numbers
import time
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field

import torch

from ..core.errors import BubblelabError, RequestError
from ..core.pipeline import Pipeline, Step, StepKind
from ..core.timeline import StepInfo, Timeline
from .block_manager import BlockManager
from .config import EngineConfig
from .loader import LoadedModel, load_model
from .model_runner import ModelRunner
from .parallel.comm import TensorParallel
from .phases import Phases
from .sampling_params import SamplingParams
from .scheduler import Scheduler
from .sequence import Sequence, SequenceStatus
from .streams import Streams


@dataclass
class RequestOutput:
    request_id: str
    new_token_ids: list[int]
    seq: Sequence = field(repr=False)
    finished: bool
    finish_reason: str | None

    @property
    def token_ids(self) -> list[int]:
        """Every generated token so far, copied when read: building it at every commit cost
        O(length) host time per row per step, inside the very bookkeeping the bubble measures."""
        return self.seq.output_ids


class LLMEngine:
    def __init__(
        self,
        config: EngineConfig,
        loaded: LoadedModel | None = None,
        *,
        timeline: Timeline | None = None,
        nvtx: bool = False,
    ):
        self.config = config
        # Tensor parallel: this process is rank 0 and starts the other ranks' processes (none at 1).
        self.workers = None
        if config.tensor_parallel > 1:
            from .distributed.workers import TPWorkers

            self.workers = TPWorkers(config, nvtx)
        try:
            self._init_device_side(config, loaded)
        except BaseException:
            if self.workers is not None:
                self.workers.close()
            raise
        self.blocks = BlockManager(self.runner.num_blocks, config.block_size)
        self.scheduler = Scheduler(config, self.blocks)
        self.pipeline: Pipeline[Sequence] = Pipeline(config.depth, debug=config.debug)
        self.timeline = timeline
        self.phases = Phases(nvtx_enabled=nvtx, timeline=timeline)
        self.eos_token_ids = set(self.loaded.config.eos_token_ids)
        if self.tokenizer is not None and self.tokenizer.eos_token_id is not None:
            self.eos_token_ids.add(self.tokenizer.eos_token_id)
        self.seqs: dict[str, Sequence] = {}
        # Per-token commit times for latency (TTFT, TPOT, ITL): one clock read per commit and one
        # append per token, so off unless asked for (run_workload(latency=True)).
        self.record_token_times = False
        self.closed = False

    def _init_device_side(self, config: EngineConfig, loaded: LoadedModel | None) -> None:
        tp = TensorParallel(0, config.tensor_parallel)
        if loaded is not None and loaded.model.tp != tp:
            raise BubblelabError(f"the model was loaded as {loaded.model.tp}, the engine runs {tp}")
        assert config.dtype is not None  # EngineConfig.__post_init__ filled in the default
        self.loaded = loaded or load_model(
            config.model,
            dtype=config.dtype,
            device=config.device,
            seed=config.seed,
            attention_backend=config.attention_backend,
            tp=tp,
        )
        self.tokenizer = self.loaded.tokenizer
        # Timing events always: a timeline may be attached later (run_workload does), and they
        # cost next to nothing.
        self.streams = Streams(torch.device(config.device), timing=True)
        if self.workers is None:
            self.runner = ModelRunner(config, self.loaded, self.streams)
        else:
            from .distributed.runner import TPModelRunner

            self.runner = TPModelRunner(config, self.loaded, self.streams, self.workers)
            self.workers.start_handoff(self.runner.slots)

    # -- requests ----------------------------------------------------------------------------------
    def add_request(self, request_id: str, prompt: str | list[int], params: SamplingParams) -> None:
        """Validates and queues one request; a bad one raises RequestError, others keep running."""
        self.add_requests([(request_id, prompt, params)])

    def add_requests(self, requests: Iterable[tuple[str, str | list[int], SamplingParams]]) -> None:
        """Validate every request, then queue them all: one bad request raises RequestError and
        none of the batch is queued, so the engine is as it was before the call."""
        seqs: dict[str, Sequence] = {}
        for request_id, prompt, params in requests:
            if request_id in seqs:
                raise RequestError(f"request id {request_id!r} appears twice in one batch")
            seqs[request_id] = self._new_sequence(request_id, prompt, params)
        now = time.perf_counter_ns()
        for request_id, seq in seqs.items():
            seq.arrival_ns = now
            self.seqs[request_id] = seq
            self.scheduler.add(seq)

    def _new_sequence(
        self, request_id: str, prompt: str | list[int], params: SamplingParams
    ) -> Sequence:
        """The request as a Sequence, or a RequestError; touches no engine state."""
        if not isinstance(request_id, str):
            raise RequestError(f"request id must be a string, got {request_id!r}")
        if request_id in self.seqs and self.seqs[request_id].status is not SequenceStatus.FINISHED:
            raise RequestError(f"request id {request_id!r} is already running")
        if not isinstance(params, SamplingParams):
            raise RequestError(
                f"request {request_id!r}: params must be SamplingParams, "
                f"got {type(params).__name__}"
            )
        ids = self._tokenize(prompt)
        if not ids:
            raise RequestError(f"request {request_id!r}: empty prompt")
        if not all(isinstance(t, numbers.Integral) and not isinstance(t, bool) for t in ids):
            raise RequestError(
                f"request {request_id!r}: a prompt is a string or a list of token ids (int)"
            )
        if len(ids) >= self.config.max_model_len:
            raise RequestError(
                f"request {request_id!r}: prompt of {len(ids)} tokens does not fit "
                f"max_model_len={self.config.max_model_len}"
            )
        if max(ids) >= self.loaded.config.vocab_size or min(ids) < 0:
            raise RequestError(
                f"request {request_id!r}: token id out of the vocabulary "
                f"[0, {self.loaded.config.vocab_size})"
            )
        constraint = self._make_constraint(request_id, params)
        seed = params.seed if params.seed is not None else zlib.crc32(request_id.encode())
        return Sequence(
            request_id, [int(t) for t in ids], params, constraint=constraint, seed=seed & 0x7FFFFFFF
        )

    def _tokenize(self, prompt: str | list[int]) -> list[int]:
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise RequestError(
                    "this model has no tokenizer (a random-weight preset): pass token ids"
                )
            return self.tokenizer.encode(prompt) if prompt else []
        try:
            return list(prompt)
        except TypeError:
            raise RequestError(
                f"a prompt is a string or a list of token ids, got {type(prompt).__name__}"
            ) from None

    def _make_constraint(self, request_id: str, params: SamplingParams):
        if params.constraint is None:
            return None
        from .constraints import make_constraint

        try:
            return make_constraint(
                params.constraint,
                vocab_size=self.loaded.config.vocab_size,
                eos_token_ids=sorted(self.eos_token_ids),
                tokenizer=self.tokenizer,
                args=params.constraint_args,
                max_tokens=params.max_tokens,
            )
        except RequestError as e:
            raise RequestError(f"request {request_id!r}: {e}") from None

    def abort(self, request_id: str) -> None:
        seq = self.seqs.get(request_id)
        if seq is None or seq.finalized or seq.status is SequenceStatus.FINISHED:
            return
        self.scheduler.abort(seq)

    def has_unfinished(self) -> bool:
        return self.scheduler.has_work() or bool(self.pipeline.in_flight)

    def set_depth(self, depth: int) -> None:
        """Switch between blocking (1) and pipelined (2) between runs. The pipeline's bound is the
        only difference, so one engine (one model load, one graph capture) serves both depths; under
        tensor parallelism the pipeline is rank 0's alone, so one set of worker processes too."""
        if depth not in (1, 2):
            raise BubblelabError(f"depth must be 1 (blocking) or 2 (pipelined), got {depth}")
        if self.has_unfinished():
            raise RuntimeError("set_depth while requests are running")
        self.config.depth = depth
        self.pipeline = Pipeline(depth, debug=self.config.debug)

    # -- the loop ----------------------------------------------------------------------------------
    def step(self) -> list[RequestOutput]:
        """A tick: launch the next step if a slot is free, sample what may be, commit the oldest."""
        self.runner.activate()
        launched = False
        if self.pipeline.can_launch():
            step_id = self.pipeline.next_step_id
            with self.phases.range("plan", step_id):
                plan = self.scheduler.plan()
            if plan is not None:
                self._launch(plan.kind, plan.seqs)
                launched = True
        self._finalize_ready()
        outputs: list[RequestOutput] = []
        if self.pipeline.in_flight and (self.pipeline.full or not launched):
            outputs = self._commit(self.pipeline.oldest())
            self._finalize_ready()
        elif not launched and self.scheduler.has_work():
            raise RuntimeError("scheduler stalled: work waiting but nothing can be launched")
        return outputs

    def _launch(self, kind: StepKind, seqs: list[Sequence]) -> Step[Sequence]:
        step = self.pipeline.launch(kind, seqs)
        tokens = sum(s.num_tokens for s in seqs) if kind is StepKind.PREFILL else len(seqs)
        with self.phases.range("launch", step.step_id):
            self.phases.step_meta(
                StepInfo(step.step_id, kind.value, len(seqs), tokens), self.config.depth
            )
            self.runner.launch(step, self.blocks, self.phases)
        return step

    def _finalize_ready(self) -> None:
        for step in self.pipeline.ready_to_sample():
            with self.phases.range("finalize", step.step_id):
                self.pipeline.mark_sampled(step)
                self.runner.finalize(step, self.phases)

    def _commit(self, step: Step[Sequence]) -> list[RequestOutput]:
        outputs = []
        with self.phases.range("commit", step.step_id):
            with self.phases.range("wait", step.step_id):
                ids = self.runner.wait(step)
            now = time.perf_counter_ns() if self.record_token_times else None
            for seq, token in zip(step.seqs, ids, strict=True):
                if seq.finalized:
                    continue  # a zombie: finished at an earlier commit, skip this one
                seq.token_ids.append(token)
                if now is not None:
                    seq.token_ns.append(now)
                reason = self._finish_reason(seq, token)
                if seq.constraint is not None and reason != "stop":
                    seq.constraint.advance(token)
                if reason is not None:
                    seq.finalized, seq.finish_reason = True, reason
                outputs.append(
                    RequestOutput(seq.request_id, [token], seq, reason is not None, reason)
                )
            self.pipeline.retire(step)  # the slot's host buffer has been read: it may be reused
            for seq in step.seqs:
                self.scheduler.release_if_done(seq)
        if self.timeline is not None:
            (f0, f1), (s0, s1) = self.runner.device_times(step, profiled=self.phases.nvtx_enabled)
            self.timeline.add_device("forward", step.step_id, f0, f1)
            self.timeline.add_device("sampling", step.step_id, s0, s1)
        return outputs

    def _finish_reason(self, seq: Sequence, token: int) -> str | None:
        p = seq.params
        if token in p.stop_token_ids:
            return "stop"
        if token in self.eos_token_ids and (not p.ignore_eos or seq.constraint is not None):
            return "stop"
        if seq.num_generated >= p.max_tokens or seq.num_tokens >= self.config.max_model_len:
            return "length"
        return None

    # -- housekeeping ------------------------------------------------------------------------------
    def check_idle(self) -> None:
        """After a run: every page free, every inflight_refs zero, both slots free."""
        self.pipeline.check_drained()
        self.blocks.check_all_free()
        assert all(s.inflight_refs == 0 for s in self.seqs.values()), "inflight_refs left non-zero"
        assert len(self.scheduler.free_rows) == self.config.max_num_seqs, "batch rows leaked"
        if self.workers is not None:  # and every worker has sampled every step it was handed
            self.workers.check_idle()

    def close(self) -> None:
        """Idempotent. Under tensor parallelism the runner's close also ends the workers and leaves
        the process group (TPModelRunner.close), within seconds whatever state the run was left in;
        an engine nobody closes is closed at interpreter exit."""
        if self.closed:
            return
        self.closed = True
        self.runner.close()
        self.streams.close()

    def __enter__(self) -> LLMEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
