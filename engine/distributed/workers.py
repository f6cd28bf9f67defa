"""Rank 0's side of tensor parallelism: it starts the worker processes, joins the process group with
them, hands each step to them through the ring, and ends the run with a WorkerError as soon as one
dies or hangs.

Failure handling. Rank 0 never waits on a worker without watching it: every wait (a worker's first
word, a ring slot, a step's result, a reply) wakes every CHECK_S to check that each worker is alive
and that the wait has not outlasted config.tensor_parallel_timeout_s (the hand-off timeout). On a
failure every worker is killed at once, so none is left behind, and the engine refuses further work.
A worker leaves by itself as soon as rank 0 is gone.

Shutdown (close(), also run at interpreter exit for an engine nobody closed): in the order that
lifecycle.py explains, within seconds on every path, leaving no process, group, ring or semaphore.
"""

from __future__ import annotations

import atexit
import json
import queue
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as tmp

from ...core.errors import BubblelabError, InvariantError, WorkerError
from ...core.pipeline import StepKind
from ...core.timeline import StepInfo, Timeline
from ..config import PRESETS, EngineConfig
from ..cuda_graphs import CudaGraphs
from ..decode_slot import DecodeSlot, LaunchRecord
from ..parallel.comm import (
    TensorParallel,
    check_split,
    close_group,
    init_group,
    set_no_multicast_env,
)
from ..streams import Streams
from .handoff import HEADER_WORDS, H, Op, ShmRing
from .lifecycle import STOP_S, exit_text, refuse_unguarded_main, release_graphs, within
from .worker import WorkerArgs, rank_device, worker_main

CHECK_S = 0.05
# Loading, torch.compile and graph capture of a large model take minutes; failures there end the
# wait early.
INIT_TIMEOUT_S = 900.0


class TPWorkers:
    def __init__(self, config: EngineConfig, nvtx: bool = False):
        refuse_unguarded_main()  # in a worker re-running an unguarded script: stop before spawning
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
        self.left: set[int] = set()  # ranks that answered SHUTDOWN: their exit is no failure
        # Rank 0's device side, attached by TPModelRunner: drained before the workers are told to
        # stop, and its graphs released before the group is left (lifecycle.py).
        self.streams: Streams | None = None
        self.graphs: CudaGraphs | None = None
        # Set when an exception cut a hand-off or a step in half: a worker may then wait in a
        # collective rank 0 never joins, so close() kills instead of asking.
        self.out_of_step = False
        self.closed = False
        self._initialised = threading.Event()
        self._init_watch = threading.Thread(target=self._watch_init, daemon=True)
        ctx = tmp.get_context("spawn")
        # (kind, rank, data) from the workers; once closed, an empty queue without semaphores.
        self.replies: Any = ctx.Queue()
        self.store = dist.TCPStore(
            "127.0.0.1", 0, self.size, is_master=True, wait_for_workers=False
        )
        self.ready = [ctx.Semaphore(0) for _ in range(self.size - 1)]
        self.space = [ctx.Semaphore(ShmRing.SLOTS) for _ in range(self.size - 1)]
        self.procs = []
        atexit.register(self.close)  # from the first spawn on, nothing outlives this process
        try:
            for rank in range(1, self.size):
                args = WorkerArgs(rank, self.size, config, self.store.port, self.ready,
                                  self.space, self.replies, nvtx, INIT_TIMEOUT_S)  # fmt: skip
                # A daemon: multiprocessing terminates it if this process exits without close().
                proc = ctx.Process(target=worker_main, args=(args,), name=f"bubblelab-tp{rank}")
                proc.daemon = True
                proc.start()
                self.procs.append(proc)
            # Every worker's first word, watched: one that dies before joining the group (an
            # unguarded script, a failed import) is named here instead of leaving rank 0 waiting.
            self._replies("hello", INIT_TIMEOUT_S)
            if self.device.type == "cuda":
                self._init_watch.start()
            init_group(TensorParallel(0, self.size), self.device, self.store, INIT_TIMEOUT_S)
        except BaseException:
            self.close()
            raise
        self._header = np.zeros(HEADER_WORDS, np.int64)

    def _watch_init(self) -> None:
        """Until every worker is ready (CUDA): NCCL does not notice a dead peer, so rank 0 blocked
        in a collective of the KV sizing or the graph warm-up would wait for the group's timeout
        (15 minutes at init). Once a worker is gone this aborts the group, which ends that wait
        with an error (TPModelRunner then names the worker)."""
        while not self._initialised.wait(CHECK_S):
            if any(p.exitcode is not None for p in self.procs):
                if dist.is_initialized():
                    close_group(abort=True)
                return

    def start_handoff(self, slots: list[DecodeSlot]) -> None:
        """Open the ring, sized for the largest message of these slots, and wait until every worker
        is ready."""
        capacity = max(max(s.meta.nbytes, s.mask_host.numel() * 4) for s in slots)
        self.ring = ShmRing.make(capacity, self.ready, self.space)
        self.store.set("bubblelab-ring", json.dumps(asdict(self.ring.spec)))
        # Each worker answers with what the NO_MULTICAST_ENV variables read in its process.
        self.worker_env = self._replies("ready", INIT_TIMEOUT_S)
        self._initialised.set()  # from here on every wait is watched

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
        try:
            self.ring.send(h, payload, check)
        except BaseException:  # a message half written or not read by every worker
            self.out_of_step = True
            raise

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
                    if rank in self.left:
                        continue
                    error = self.errors.get(rank, "").strip().splitlines()[-1:]
                    how = exit_text(proc.exitcode) + (f": {error[0]}" if error else "")
                    self.fail(f"rank {rank} (pid {proc.pid}) {how}")
            if time.monotonic() >= deadline:
                return
            time.sleep(CHECK_S)

    def abandon(self, why: str) -> None:
        """Rank 0 gave up mid-step (an exception cut a tick short): every later use raises
        WorkerError(why), and close() kills the workers, which may be out of step."""
        self.failed = WorkerError(why)

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
        if problems:
            raise InvariantError(2, f"workers not idle: {problems}")

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
            if not self._note(k, rank, data):
                if k != kind:
                    raise WorkerError(f"expected {kind!r} from rank {rank}, got {k!r}")
                got[rank] = data
        return got

    def _drain_replies(self) -> None:
        while True:
            try:
                k, rank, data = self.replies.get_nowait()
            except (queue.Empty, OSError, ValueError):
                return
            self._note(k, rank, data)

    def _note(self, kind: str, rank: int, data: Any) -> bool:
        """Keep what a reply says about the worker itself (its traceback, that it has left)."""
        if kind == "error":
            self.errors[rank] = data
        elif kind == "left":
            self.left.add(rank)
        return kind in ("error", "left")

    # -- shutdown ----------------------------------------------------------------------------------
    def healthy(self) -> bool:
        return self.failed is None and all(p.exitcode is None for p in self.procs)

    def close(self) -> None:
        """End every worker and leave the group, within seconds; idempotent. Cleanly when the ranks
        are in step (rank 0 drains, sends SHUTDOWN, then every rank releases its graphs and leaves
        the group at the same time); else the workers are killed first and rank 0 aborts the group.
        Either way, then: kill whatever is left, remove the ring, let go of the semaphores and the
        reply queue."""
        if self.closed:
            return
        self.closed = True
        atexit.unregister(self.close)
        self._initialised.set()
        clean = False
        try:
            clean = self._send_shutdown()
        finally:
            self._end(clean)

    def _end(self, clean: bool) -> None:
        """Whatever happened before (even Ctrl-C inside close), nothing outlives this."""
        try:
            if not clean:
                self._kill()
            # NCCL's destroy is collective: a rank that waited for its peers to leave before leaving
            # itself would wait for ever (it did, on two GPUs: both sides sat out their deadlines).
            self._leave_group(abort=not clean)
            if clean:
                self._wait_left()
            deadline = time.monotonic() + (STOP_S if clean else 0.0)
            for proc in self.procs:  # after leaving the group a worker only has to exit
                proc.join(timeout=max(0.0, deadline - time.monotonic()))
        finally:
            self._kill()
            self._release_ipc()

    def _send_shutdown(self) -> bool:
        """Drain rank 0 and send SHUTDOWN; False when the ranks are not in step (the workers must
        be killed)."""
        if not self.healthy() or self.ring is None or self.out_of_step:
            return False  # a worker failed, is still starting, or may wait in a collective
        try:
            if self.streams is not None:  # every collective rank 0 enqueued has completed
                self.streams.drain(self.watch("rank 0's last device work"))
            self._send(self._new_header(Op.SHUTDOWN), None, "the shutdown")
        except (WorkerError, RuntimeError):  # RuntimeError: rank 0's CPU device thread failed
            return False
        return True

    def _wait_left(self) -> None:
        """Every worker answers `left` once out of the group; one that does not within STOP_S is
        killed by _end."""
        started = time.monotonic()
        while len(self.left) < self.size - 1 and time.monotonic() - started < STOP_S:
            try:
                self._note(*self.replies.get(timeout=CHECK_S))  # a stale reply is skipped
            except queue.Empty:
                if not self.healthy():
                    return

    def _leave_group(self, abort: bool) -> None:
        graphs, self.graphs = self.graphs, None
        if graphs is not None:
            release_graphs(graphs)
        if self._init_watch.is_alive():  # it may be aborting the group: one leaves it, not both
            self._init_watch.join(STOP_S)
        try:
            left = within(STOP_S, lambda: close_group(abort=abort))
        except Exception as e:  # noqa: BLE001 - the workers are gone either way: say it, go on
            warnings.warn(f"rank 0 left the process group with an error: {e}", stacklevel=2)
            return
        if not left:
            warnings.warn(
                f"rank 0 did not leave the tensor-parallel process group within {STOP_S:.0f} s "
                "(a CUDA graph that captured its collectives still alive?); abandoned",
                RuntimeWarning,
                stacklevel=2,
            )

    def _release_ipc(self) -> None:
        if self.ring is not None:
            self.ring.close(unlink=True)
            self.ring = None
        # Under spawn the semaphores (the ring's, the queue's) are named, in /dev/shm: each is
        # unlinked once nothing refers to it.
        replies, self.replies = self.replies, queue.SimpleQueue()
        replies.close()
        replies.cancel_join_thread()
        self.ready, self.space = [], []

    def _kill(self) -> None:
        for proc in self.procs:
            if proc.exitcode is None:
                proc.kill()
        for proc in self.procs:
            proc.join(timeout=5)


def _timeline(record: dict) -> Timeline:
    t = Timeline(depth=record["depth"], host=list(record["host"]), device=list(record["device"]))
    for s in record["steps"]:
        t.add_step(StepInfo(**s))
    return t
