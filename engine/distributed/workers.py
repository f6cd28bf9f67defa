"""Rank 0's side of tensor parallelism: it starts the worker processes, joins the process group with
them, hands each step to them through the ring, and ends the run with a WorkerError as soon as one
dies or hangs.

Failure handling. Rank 0 never waits on a worker without watching it: every wait (a ring slot, a
step's result, a reply) wakes every CHECK_S to check that each worker is alive and that the wait has
not outlasted config.tensor_parallel_timeout_s (the hand-off timeout). On a failure every worker is
killed at once, so none is left behind, and the engine refuses further work; close() then aborts the
process group (a clean destroy could wait forever on the dead peer). A worker leaves by itself as
soon as rank 0 is gone.
"""

from __future__ import annotations

import atexit
import json
import queue
import signal
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as tmp

from ...core.errors import BubblelabError, WorkerError
from ...core.pipeline import StepKind
from ...core.timeline import StepInfo, Timeline
from ..config import PRESETS, EngineConfig
from ..decode_slot import DecodeSlot, LaunchRecord
from ..parallel.comm import (
    TensorParallel,
    check_split,
    close_group,
    init_group,
    set_no_multicast_env,
)
from .handoff import HEADER_WORDS, H, Op, ShmRing
from .worker import WorkerArgs, rank_device, worker_main

CHECK_S = 0.05
# Loading, torch.compile and graph capture of a large model take minutes; failures there end the
# wait early.
INIT_TIMEOUT_S = 900.0


class TPWorkers:
    def __init__(self, config: EngineConfig, nvtx: bool = False):
        self.size, self.timeout_s = config.tensor_parallel, config.tensor_parallel_timeout_s
        self.device = rank_device(config, 0)
        if self.device.type == "cuda" and torch.cuda.device_count() < self.size + (
            self.device.index or 0
        ):
            raise BubblelabError(
                f"tensor parallel {self.size} needs {self.size} GPUs from {self.device}; "
                f"{torch.cuda.device_count()} visible"
            )
        # A split that cannot work fails here, before any process starts.
        if config.model in PRESETS:
            check_split(PRESETS[config.model], self.size)
        if dist.is_initialized():
            raise BubblelabError(
                "a tensor-parallel engine is already running in this process; close it first"
            )
        set_no_multicast_env()  # before any worker is spawned: they inherit it
        self.failed: WorkerError | None = None
        self.ring: ShmRing | None = None
        self.errors: dict[int, str] = {}
        ctx = tmp.get_context("spawn")
        self.replies = ctx.Queue()
        self.store = dist.TCPStore(
            "127.0.0.1", 0, self.size, is_master=True, wait_for_workers=False
        )
        self.ready = [ctx.Semaphore(0) for _ in range(self.size - 1)]
        self.space = [ctx.Semaphore(ShmRing.SLOTS) for _ in range(self.size - 1)]
        self.procs = []
        for rank in range(1, self.size):
            args = WorkerArgs(rank, self.size, config, self.store.port, self.ready, self.space,
                              self.replies, nvtx, INIT_TIMEOUT_S)  # fmt: skip
            # A daemon: multiprocessing terminates it if this process exits without close().
            proc = ctx.Process(target=worker_main, args=(args,), name=f"bubblelab-tp{rank}")
            proc.daemon = True
            proc.start()
            self.procs.append(proc)
        atexit.register(self.close)
        init_group(TensorParallel(0, self.size), self.device, self.store, INIT_TIMEOUT_S)
        self._header = np.zeros(HEADER_WORDS, np.int64)

    def start_handoff(self, slots: list[DecodeSlot]) -> None:
        """Open the ring, sized for the largest message of these slots, and wait until every worker
        is ready."""
        capacity = max(max(s.meta.nbytes, s.mask_host.numel() * 4) for s in slots)
        self.ring = ShmRing.make(capacity, self.ready, self.space)
        self.store.set("bubblelab-ring", json.dumps(asdict(self.ring.spec)))
        # Each worker answers with what the NO_MULTICAST_ENV variables read in its process.
        self.worker_env = self._replies("ready", INIT_TIMEOUT_S)

    # -- the hand-off ------------------------------------------------------------------------------
    def send_launch(self, record: LaunchRecord, slot: DecodeSlot, host_bytes: np.ndarray) -> None:
        h = self._new_header(Op.LAUNCH, record.step_id, slot.index)
        h[H.KIND] = int(record.kind is StepKind.PREFILL)
        h[H.ROWS] = record.rows
        h[H.BUCKET] = -1 if record.bucket is None else record.bucket
        h[H.TOKENS] = record.tokens if record.kind is StepKind.PREFILL else record.rows
        f = record.flags
        h[H.ALL_GREEDY], h[H.ANY_TOP_K], h[H.ANY_TOP_P], h[H.MAX_TOP_K] = f
        self._send(h, host_bytes[: record.nbytes], f"the inputs of step {record.step_id}")

    def send_finalize(self, record: LaunchRecord, slot: DecodeSlot, masked: bool) -> None:
        h = self._new_header(Op.FINALIZE, record.step_id, slot.index)
        h[H.MASKED] = masked
        payload = slot.mask_np[: record.rows] if masked else None
        self._send(h, payload, f"the sampling of step {record.step_id}")

    def _new_header(self, op: Op, step: int = -1, slot: int = 0, arg: int = 0) -> np.ndarray:
        h = self._header
        h[:] = 0
        h[H.OP], h[H.STEP], h[H.SLOT], h[H.ARG] = op, step, slot, arg
        return h

    def _send(self, h: np.ndarray, payload: np.ndarray | None, what: str) -> None:
        if self.failed:
            raise self.failed
        started = time.monotonic()

        def check(reader: int) -> None:
            self.check_alive()
            if time.monotonic() - started > self.timeout_s:
                self.fail(
                    f"rank {reader + 1} has not taken {what} for {self.timeout_s:.0f} s: it hangs"
                )

        assert self.ring is not None, "start_handoff opens the ring first"
        self.ring.send(h, payload, check)

    # -- watching ----------------------------------------------------------------------------------
    def watch(self, what: str) -> Callable[[], None]:
        """A check for Streams.wait: raises WorkerError once a worker died or `what` took too
        long."""
        started = time.monotonic()

        def check() -> None:
            self.check_alive()
            if time.monotonic() - started > self.timeout_s:
                assert self.ring is not None, "start_handoff opens the ring first"
                lag = max(range(self.size - 1), key=self.ring.backlog) + 1
                self.fail(f"{what} did not finish within {self.timeout_s:.0f} s "
                          f"(rank {lag} is the furthest behind): a worker hangs")  # fmt: skip

        return check

    def check_alive(self, grace_s: float = 0.0) -> None:
        """Raise WorkerError if a worker has exited (waiting up to grace_s for one that is
        exiting)."""
        if self.failed:
            raise self.failed
        deadline = time.monotonic() + grace_s
        while True:
            for rank, proc in enumerate(self.procs, 1):
                if proc.exitcode is not None:
                    self._drain_replies()
                    error = self.errors.get(rank, "").strip().splitlines()[-1:]
                    how = _exit_text(proc.exitcode) + (f": {error[0]}" if error else "")
                    self.fail(f"rank {rank} (pid {proc.pid}) {how}")
            if time.monotonic() >= deadline:
                return
            time.sleep(CHECK_S)

    def fail(self, message: str) -> None:
        """End tensor parallelism: kill every worker now and raise (and keep raising) the error."""
        self.failed = WorkerError(f"tensor-parallel worker failed: {message}")
        self._kill()
        raise self.failed

    # -- runs (timelines, profiler range) and idle checks ------------------------------------------
    def begin_run(self, profile: bool, depth: int) -> None:
        h = self._new_header(Op.BEGIN_RUN, arg=int(profile))
        h[H.DEPTH] = depth
        self._send(h, None, "a run's start")
        self._replies("begun", self.timeout_s)

    def end_run(self) -> list[Timeline]:
        """Every worker's timeline of the run, rank 1 first."""
        self._send(self._new_header(Op.END_RUN), None, "a run's end")
        records = self._replies("timeline", self.timeout_s)
        return [_timeline(records[r]) for r in range(1, self.size)]

    def check_idle(self) -> None:
        self._send(self._new_header(Op.CHECK_IDLE), None, "an idle check")
        problems = {r: p for r, p in self._replies("idle", self.timeout_s).items() if p}
        assert not problems, f"workers not idle: {problems}"

    def _replies(self, kind: str, timeout_s: float) -> dict[int, Any]:
        """One `kind` reply from every worker, watching them while waiting (its data as sent)."""
        got: dict[int, Any] = {}
        started = time.monotonic()
        while len(got) < self.size - 1:
            try:
                k, rank, data = self.replies.get(timeout=CHECK_S)
            except queue.Empty:
                self.check_alive()
                if time.monotonic() - started > timeout_s:
                    self.fail(f"no {kind!r} from every worker within {timeout_s:.0f} s")
                continue
            if k == "error":
                self.errors[rank] = data
            else:
                assert k == kind, f"expected {kind!r} from rank {rank}, got {k!r}"
                got[rank] = data
        return got

    def _drain_replies(self) -> None:
        while True:
            try:
                k, rank, data = self.replies.get_nowait()
            except (queue.Empty, OSError, ValueError):
                return
            if k == "error":
                self.errors[rank] = data

    # -- shutdown ----------------------------------------------------------------------------------
    def healthy(self) -> bool:
        return self.failed is None and all(p.exitcode is None for p in self.procs)

    def close(self) -> None:
        """Stop the workers (cleanly unless one failed), leave the group, remove the ring.
        Idempotent."""
        atexit.unregister(self.close)
        clean = self.healthy() and self.ring is not None  # without the ring they are still in init
        if clean:
            try:
                self._send(self._new_header(Op.SHUTDOWN), None, "the shutdown")
            except WorkerError:
                clean = False
        if clean:
            close_group()  # together with the workers, which destroy their side on SHUTDOWN
        for proc in self.procs:
            proc.join(timeout=10 if clean else 0)
        self._kill()
        if not clean:
            close_group(abort=True)
        if self.ring is not None:
            self.ring.close(unlink=True)
            self.ring = None
        self.replies.close()
        self.replies.cancel_join_thread()

    def _kill(self) -> None:
        for proc in self.procs:
            if proc.exitcode is None:
                proc.kill()
        for proc in self.procs:
            proc.join(timeout=5)


def _exit_text(code: int) -> str:
    if code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"


def _timeline(record: dict) -> Timeline:
    t = Timeline(depth=record["depth"], host=list(record["host"]), device=list(record["device"]))
    for s in record["steps"]:
        t.add_step(StepInfo(**s))
    return t
