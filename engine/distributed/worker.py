"""A tensor-parallel worker process: rank r >= 1 follows rank 0's steps.

It holds its shard of the model, its own KV pool, DecodeSlots and CUDA graphs (the same ModelRunner
as rank 0), and runs what rank 0 launched and finalized, in rank 0's order: a step's packed inputs
arrive through the hand-off ring and are uploaded exactly as rank 0 uploads them; sampling runs on
the all-gathered full logits, so every rank writes the same token into its own pending-token buffer.
A worker has no scheduler, no pipeline and nothing to commit. It reuses a slot once the slot's
previous step has sampled on its own GPU (rank 0 relaunches a slot only after committing that step,
so the wait is normally already over).

Its phases carry NVTX ranges (domain "bubblelab", payload = step id) and go to its own timeline,
sent back to rank 0 at the end of each measured run; `recv` (timeline only) is the host waiting for
rank 0's next message.
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing as mp
import os
import signal
import time
import traceback
from dataclasses import dataclass
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist

from ...core.errors import InvariantError
from ...core.pipeline import NUM_SLOTS, StepKind
from ...core.timeline import StepInfo, Timeline
from ..config import EngineConfig
from ..decode_slot import LaunchRecord
from ..loader import load_model
from ..model_runner import ModelRunner
from ..parallel.comm import (
    NO_MULTICAST_ENV,
    TensorParallel,
    close_group,
    init_group,
)
from ..phases import Phases
from ..sampler import SamplingFlags
from ..streams import Streams
from .handoff import H, Op, RingSpec, ShmRing
from .lifecycle import release_graphs

SPIN_S = 0.05


@dataclass
class WorkerArgs:
    """Everything a spawned worker needs (pickled by multiprocessing's spawn)."""

    rank: int
    size: int
    config: EngineConfig
    store_port: int
    ready: list  # the ring's semaphores (see handoff.ShmRing)
    space: list
    replies: mp.Queue  # (kind, rank, data) back to rank 0
    nvtx: bool
    init_timeout_s: float


def rank_device(config: EngineConfig, rank: int) -> torch.device:
    """Rank r's device: cuda:(rank 0's index + r), or the CPU."""
    device = torch.device(config.device)
    if device.type != "cuda":
        return device
    return torch.device("cuda", (device.index or 0) + rank)


def worker_main(args: WorkerArgs) -> None:
    """The spawned process's entry point: serve until SHUTDOWN; any failure goes back to rank 0
    first."""
    # Ctrl-C in a terminal reaches every process of the group: rank 0 alone decides how the workers
    # end (a worker that died of it mid-step would turn a clean stop into a failure).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        Worker(args).serve()
    except BaseException:
        args.replies.put(("error", args.rank, traceback.format_exc()))
        raise SystemExit(1) from None


@dataclass
class _Held:
    """The step a slot holds on this rank, until its sampling is done on this GPU."""

    record: LaunchRecord
    sampled: bool = False


class Worker:
    def __init__(self, a: WorkerArgs):
        self.rank, self.replies = a.rank, a.replies
        self.parent = mp.parent_process()
        device = rank_device(a.config, a.rank)
        if device.type == "cuda":
            torch.cuda.set_device(device)
        tp = TensorParallel(a.rank, a.size)
        wait = timedelta(seconds=a.init_timeout_s)  # rank 0 publishes the ring after its own init
        store = dist.TCPStore("127.0.0.1", a.store_port, a.size, is_master=False, timeout=wait)
        self.replies.put(("hello", self.rank, os.getpid()))  # alive: rank 0 now joins the group
        init_group(tp, device, store, a.init_timeout_s)
        self.config = config = dataclasses.replace(a.config, device=str(device))
        assert config.dtype is not None  # EngineConfig.__post_init__ filled in the default
        loaded = load_model(
            config.model,
            dtype=config.dtype,
            device=config.device,
            seed=config.seed,
            attention_backend=config.attention_backend,
            tp=tp,
        )
        self.timeline = Timeline(enabled=False)
        self.phases = Phases(nvtx_enabled=a.nvtx, timeline=self.timeline)
        self.streams = Streams(device)
        # Its KV pool size and its graph warm-up run collectives: every rank builds one, in step.
        self.runner = ModelRunner(config, loaded, self.streams)
        spec = RingSpec(**json.loads(store.get("bubblelab-ring")))
        self.ring = ShmRing(spec, a.ready, a.space, create=False)
        self.reader = a.rank - 1
        # On a GPU host the worker spins on the ring between messages (up to a step's time; a core
        # each, as vLLM's workers do): waking a sleeping process costs both sides. On the CPU the
        # worker's device thread needs the interpreter, so it sleeps at once.
        self.spin_s = SPIN_S if device.type == "cuda" else 0.0
        self.host_bytes = [slot.meta.host.numpy() for slot in self.runner.slots]
        self.held: list[_Held | None] = [None] * NUM_SLOTS
        self.depth = config.depth  # rank 0's, as of the last BEGIN_RUN
        env = {k: os.environ.get(k) for k in NO_MULTICAST_ENV}
        self.replies.put(("ready", self.rank, env))

    def serve(self) -> None:
        handlers = {Op.LAUNCH: self.launch, Op.FINALIZE: self.finalize}
        while True:
            waited = time.perf_counter_ns()
            header, payload = self.ring.recv(self.reader, self._check_parent, self.spin_s)
            op = Op(int(header[H.OP]))
            try:
                if op in handlers:
                    step = int(header[H.STEP])
                    self.timeline.add_host("recv", step, waited, time.perf_counter_ns())
                    handlers[op](header, payload)
                elif op is Op.SHUTDOWN:
                    break
                else:
                    self.control(op, header)
            finally:
                self.ring.release(self.reader)
        self.leave()

    def leave(self) -> None:
        """SHUTDOWN (the ranks are in step): drain this device, release the graphs (NCCL destroys
        a communicator only after them), leave the group (rank 0 leaves at the same time: the
        destroy is collective), then tell rank 0."""
        self.streams.drain(self._check_parent)
        release_graphs(self.runner.graphs)
        self.ring.close()
        close_group()
        self.replies.put(("left", self.rank, None))

    # -- steps -------------------------------------------------------------------------------------
    def launch(self, h: np.ndarray, payload: np.ndarray) -> None:
        i, step, rows = int(h[H.SLOT]), int(h[H.STEP]), int(h[H.ROWS])
        self._retire(i)  # the slot's host buffer is about to be overwritten
        slot = self.runner.slots[i]
        kind = StepKind.PREFILL if h[H.KIND] else StepKind.DECODE
        with self.phases.range("launch", step):
            self.phases.step_meta(StepInfo(step, kind.value, rows, int(h[H.TOKENS])), self.depth)
            self.host_bytes[i][: payload.nbytes] = payload
            flags = SamplingFlags(
                bool(h[H.ALL_GREEDY]),
                bool(h[H.ANY_TOP_K]),
                bool(h[H.ANY_TOP_P]),
                int(h[H.MAX_TOP_K]),
            )
            bucket = int(h[H.BUCKET])
            record = slot.record = LaunchRecord(
                step, kind, rows, flags, bucket=None if bucket < 0 else bucket,
                nbytes=payload.nbytes, tokens=int(h[H.TOKENS]),
            )  # fmt: skip
            if kind is StepKind.PREFILL and record.bucket is None:  # eager: lengths on the host
                record.lens = np.diff(slot.meta.np["p_cu_seqlens"][: rows + 1]).tolist()
            self.runner.enqueue_forward(slot, record, self.phases)
        self.held[i] = _Held(record)

    def finalize(self, h: np.ndarray, payload: np.ndarray) -> None:
        i, step = int(h[H.SLOT]), int(h[H.STEP])
        held, slot = self.held[i], self.runner.slots[i]
        if held is None or held.record.step_id != step or held.sampled:
            raise InvariantError(3, f"rank {self.rank}: finalize of step {step} it does not hold")
        masked, rows = bool(h[H.MASKED]), held.record.rows
        with self.phases.range("finalize", step):
            if masked:
                with self.phases.range("mask", step):
                    slot.mask_np[:rows] = payload.view(np.int32).reshape(rows, -1)
                    self.runner.enqueue_mask(slot, rows)
            self.runner.enqueue_sampling(slot, held.record, masked, self.phases, copy_back=False)
        held.sampled = True

    def _retire(self, i: int) -> None:
        """Wait until slot i's step has sampled on this GPU, and keep its device times."""
        held = self.held[i]
        if held is None:
            return
        if not held.sampled:
            raise InvariantError(6, f"rank {self.rank}: slot {i} relaunched before step sampled")
        slot = self.runner.slots[i]
        self.streams.wait(slot.ev_done, self._check_parent)
        if self.timeline.enabled:
            (f0, f1), (s0, s1) = slot.device_times(self.phases.nvtx_enabled)
            self.timeline.add_device("forward", held.record.step_id, f0, f1)
            self.timeline.add_device("sampling", held.record.step_id, s0, s1)
        self.held[i] = None

    # -- control -----------------------------------------------------------------------------------
    def control(self, op: Op, h: np.ndarray) -> None:
        if op is Op.CHECK_IDLE:  # rank 0 drained its pipeline: every step here has sampled
            unsampled = [x.record.step_id for x in self.held if x and not x.sampled]
            problem = f"steps {unsampled} launched but never sampled" if unsampled else None
            self.replies.put(("idle", self.rank, problem))
            if unsampled:
                return
        for i in range(NUM_SLOTS):
            self._retire(i)
        self.streams.synchronize()
        if op is Op.BEGIN_RUN:
            self.timeline.clear()
            self.depth = int(h[H.DEPTH])
            self.timeline.enabled, self.timeline.depth = True, self.depth
            self.streams.calibrate()
            # Rank 0 alone brackets the capture: nsys's range covers every process of the session
            # (both GPUs were traced on two H100s), and a second process starting and stopping
            # ranges made nsys 2025.3 end its session after the first and kill the run (exit 143).
            self.replies.put(("begun", self.rank, None))
        elif op is Op.END_RUN:
            self.timeline.enabled = False
            t = self.timeline
            data = {"depth": t.depth, "host": t.host, "device": t.device,
                    "steps": [vars(s) for s in t.steps.values()]}  # fmt: skip
            self.replies.put(("timeline", self.rank, data))

    def _check_parent(self) -> None:
        """Rank 0 is gone: leave at once (a clean exit could wait forever on a collective)."""
        if self.parent is not None and not self.parent.is_alive():
            os._exit(1)
