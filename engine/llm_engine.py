"""LLMEngine, the serving engine: requests in, tokens out. A `step()` is one tick of the loop
(core.loop.Loop: launch, finalize, commit, finalize), and the engine is the loop's work on the
device: it launches and finalizes steps on the model runner, waits for their sampled ids and
commits each row (stop tokens, EOS, length cap, the grammar's state).

`depth` (1 or 2) is the only difference between blocking and pipelined decoding: the loop allows at
most `depth` steps in flight, and the same phases run in the same code.
"""

from __future__ import annotations

import numbers
import time
import zlib
from collections.abc import Iterable
from collections.abc import Sequence as SequenceABC
from dataclasses import dataclass, field

import torch

from ..core.block_manager import BlockManager
from ..core.errors import BubblelabError, InvariantError, OptionError, RequestError, WorkerError
from ..core.loop import Loop
from ..core.pipeline import NUM_SLOTS, Step, check_depth
from ..core.scheduler import Scheduler
from ..core.sequence import Sequence, SequenceStatus
from ..core.timeline import StepInfo, Timeline
from .config import EngineConfig
from .loader import LoadedModel, load_model
from .model_runner import ModelRunner
from .parallel.comm import TensorParallel
from .phases import Phases
from .sampling_params import SamplingParams
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
        self.scheduler = Scheduler(config.limits, self.blocks)
        self.timeline = timeline
        self.phases = Phases(nvtx_enabled=nvtx, timeline=timeline)
        self.loop = Loop(config.depth, self.scheduler, self, self.phases, debug=config.debug)
        self.eos_token_ids = set(self.loaded.config.eos_token_ids)
        if self.tokenizer is not None and self.tokenizer.eos_token_id is not None:
            self.eos_token_ids.add(self.tokenizer.eos_token_id)
        self.seqs: dict[str, Sequence] = {}
        # Per-token commit times for latency (TTFT, TPOT, ITL): one clock read per commit and one
        # append per token, so off unless asked for (run_workload(latency=True)).
        self.record_token_times = False
        self.closed = False
        self._commit_ns: int | None = None  # the clock read of the commit under way

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
        positions = self.loaded.config.max_position_embeddings
        if (
            config.max_model_len > positions
        ):  # its rotary table ends there: a position past it fails
            raise OptionError(
                "max_model_len",
                f"must be at most the model's {positions} positions",
                config.max_model_len,
            )
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
        try:
            ids = self._tokenize(prompt)
        except RequestError as e:
            raise RequestError(f"request {request_id!r}: {e}") from None
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
        return Sequence(request_id, ids, params, constraint=constraint, seed=seed & 0x7FFFFFFF)

    def _tokenize(self, prompt: str | list[int]) -> list[int]:
        """A prompt's token ids: text through the tokenizer, or a list (tuple) of ints as is."""
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise RequestError(
                    "this model has no tokenizer (a random-weight preset): pass token ids"
                )
            try:
                prompt.encode("utf-8")
            except UnicodeEncodeError as e:  # a lone surrogate: no tokenizer can read it
                raise RequestError(
                    f"the prompt is not valid Unicode (a lone surrogate at character {e.start})"
                ) from None
            ids = self.tokenizer.encode(prompt) if prompt else []
        elif isinstance(prompt, SequenceABC) and not isinstance(prompt, (bytes, bytearray)):
            ids = list(prompt)
            # By distinct type, not token by token: an isinstance against the Integral ABC costs
            # ~1 us, so a 1024-token prompt took ~1 ms of the host's time before its prefill.
            kinds = set(map(type, ids))
            if not all(issubclass(k, numbers.Integral) and not issubclass(k, bool) for k in kinds):
                raise RequestError("a prompt is a string or a list of token ids (int)")
        else:
            raise RequestError(
                f"a prompt is a string or a list of token ids, got {type(prompt).__name__}"
            )
        if not ids:
            raise RequestError("empty prompt")
        return [int(t) for t in ids]

    def min_tokens(self, params: SamplingParams) -> int:
        """The smallest max_tokens a request with these parameters may ask for (its constraint's
        shortest complete output; 1 without one)."""
        if params.constraint is None:
            return 1
        from .constraints import min_output_tokens

        return min_output_tokens(params.constraint, **self._vocabulary(params))

    def _make_constraint(self, request_id: str, params: SamplingParams):
        if params.constraint is None:
            return None
        from .constraints import make_constraint

        try:
            return make_constraint(
                params.constraint, **self._vocabulary(params), max_tokens=params.max_tokens
            )
        except RequestError as e:
            raise RequestError(f"request {request_id!r}: {e}") from None

    def _vocabulary(self, params: SamplingParams) -> dict:
        """What a request's constraint is built against: this model's vocabulary, its EOS tokens,
        its tokenizer, and the request's constraint arguments."""
        return dict(
            vocab_size=self.loaded.config.vocab_size,
            eos_token_ids=sorted(self.eos_token_ids),
            tokenizer=self.tokenizer,
            args=params.constraint_args,
        )

    def abort(self, request_id: str) -> None:
        seq = self.seqs.get(request_id)
        if seq is None or seq.finalized or seq.status is SequenceStatus.FINISHED:
            return
        self.scheduler.abort(seq)

    def cancel(self, request_ids: Iterable[str]) -> None:
        """End these requests now and forget them, whatever state an exception left the loop in
        (an `on_step` callback raising, Ctrl-C inside a tick): each is aborted, the steps in flight
        that hold them are committed so their pages and rows go back (release late), and they
        leave `seqs`. Ids not here are ignored. A loop an exception broke half way through a tick
        is started afresh (reset), so the engine stays usable either way; a tensor-parallel one
        cannot be, and is left to close."""
        seqs = [self.seqs[r] for r in dict.fromkeys(request_ids) if r in self.seqs]
        if self.workers is not None and self.workers.failed is not None:
            # A tensor-parallel engine whose worker failed can only close: its error, raised on,
            # is the news, not a reset's refusal.
            for seq in seqs:
                del self.seqs[seq.request_id]
            return
        try:
            for seq in seqs:
                self.abort(seq.request_id)
                self.scheduler.release_if_done(seq)  # a commit cut short before its release
            drained = self._drain(seqs)
        except Exception:  # a tick broken half way cannot be replayed
            drained = False
        if not drained and self.workers is not None:
            # Nor reset: the workers' slots would disagree with rank 0's. The engine can only close,
            # and the exception that cut the tick short (Ctrl-C) is the news, not a refusal.
            self.workers.abandon("a tensor-parallel step was cut short: the engine can only close")
        elif not drained:
            self.reset()
        for seq in seqs:
            del self.seqs[seq.request_id]

    def _drain(self, seqs: list[Sequence]) -> bool:
        """Tick until these aborted sequences are released: the steps in flight that hold them
        commit within `depth` ticks."""
        for _ in range(2 * NUM_SLOTS):
            if all(s.status is SequenceStatus.FINISHED for s in seqs):
                return True
            self.step()
        return all(s.status is SequenceStatus.FINISHED for s in seqs)

    def reset(self) -> None:
        """Forget every request and every step in flight, keeping the model, its graphs and the KV
        tensors: a fresh scheduler, page pool and pipeline, as after construction. Waits for the
        device first, so no step still writes into a page handed out again. Every unfinished
        request ends as aborted."""
        if self.workers is not None:  # the workers' own slots would disagree with rank 0's
            raise WorkerError("a tensor-parallel engine cannot be reset: close it")
        self.streams.synchronize()
        for seq in self.seqs.values():
            if seq.status is not SequenceStatus.FINISHED:
                seq.finalized, seq.finish_reason = True, "abort"
                seq.status = SequenceStatus.FINISHED
            seq.inflight_refs, seq.row, seq.preempted = 0, None, False
            seq.block_table.clear()
        next_step_id = self.loop.pipeline.next_step_id  # step ids stay unique (slot tags, timeline)
        self.blocks = BlockManager(self.runner.num_blocks, self.config.block_size)
        self.scheduler = Scheduler(self.config.limits, self.blocks)
        self.loop = Loop(self.config.depth, self.scheduler, self, self.phases, self.config.debug)
        self.loop.pipeline.next_step_id = next_step_id

    def has_unfinished(self) -> bool:
        return self.loop.busy()

    def set_depth(self, depth: int) -> None:
        """Switch between blocking (1) and pipelined (2) between runs. The loop's bound is the only
        difference, so one engine (one model load, one graph capture) serves both depths; under
        tensor parallelism the loop is rank 0's alone, so one set of worker processes too."""
        check_depth(depth)
        if self.has_unfinished():
            raise RuntimeError("set_depth while requests are running")
        self.config.depth = depth
        self.loop = Loop(depth, self.scheduler, self, self.phases, debug=self.config.debug)

    # -- the loop ----------------------------------------------------------------------------------
    def step(self) -> list[RequestOutput]:
        """One tick of the loop: launch the next step if a slot is free, sample what may be, commit
        the oldest (core.loop.Loop.tick)."""
        self.runner.activate()
        return self.loop.tick()

    # -- the loop's work (core.loop.Work): called by the loop, in its order ------------------------
    def launch(self, step: Step) -> None:
        info = StepInfo(step.step_id, step.kind.value, len(step.seqs), step.tokens)
        self.phases.step_meta(info, self.config.depth)
        self.runner.launch(step, self.blocks, self.phases)

    def finalize(self, step: Step) -> None:
        self.runner.finalize(step, self.phases)

    def wait(self, step: Step) -> list[int]:
        ids = self.runner.wait(step)
        self._commit_ns = time.perf_counter_ns() if self.record_token_times else None
        return ids

    def accept(self, seq: Sequence, token: int) -> RequestOutput:
        p = seq.params
        reason = None
        if token in p.stop_token_ids:
            reason = "stop"
        elif token in self.eos_token_ids and (not p.ignore_eos or seq.constraint is not None):
            reason = "stop"
        elif seq.num_generated >= p.max_tokens or seq.num_tokens >= self.config.max_model_len:
            reason = "length"
        if seq.constraint is not None and reason != "stop":
            reason = self._advance_grammar(seq, token, reason)
        if reason is not None:
            seq.finalized, seq.finish_reason = True, reason
        if reason == "dead_end":
            return RequestOutput(seq.request_id, [], seq, True, reason)
        if self._commit_ns is not None:
            seq.token_ns.append(self._commit_ns)
        return RequestOutput(seq.request_id, [token], seq, reason is not None, reason)

    @staticmethod
    def _advance_grammar(seq: Sequence, token: int, reason: str | None) -> str | None:
        """Moves a constrained request's grammar past `token`. A grammar that allows no token here
        (a dead end: its mask was empty) ends this request alone, without the token it refused;
        a length cap that ends it before the grammar is complete says the output is cut."""
        try:
            seq.constraint.advance(token)
        except ValueError:
            seq.token_ids.pop()
            return "dead_end"
        if reason == "length" and not seq.constraint.is_complete():
            return "cut"
        return reason

    def committed(self, step: Step) -> None:
        if self.timeline is not None:
            (f0, f1), (s0, s1) = self.runner.device_times(step, profiled=self.phases.nvtx_enabled)
            self.timeline.add_device("forward", step.step_id, f0, f1)
            self.timeline.add_device("sampling", step.step_id, s0, s1)

    # -- housekeeping ------------------------------------------------------------------------------
    def check_idle(self) -> None:
        """After a run: both slots free (I2), every inflight_refs zero (I4), every page and batch
        row back (I7)."""
        self.loop.pipeline.check_drained()
        if any(s.inflight_refs for s in self.seqs.values()):
            raise InvariantError(4, "inflight_refs left non-zero")
        self.scheduler.check_all_free()
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
