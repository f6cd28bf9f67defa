"""The step hand-off from rank 0 to the workers: a shared-memory ring with semaphores.

Rank 0 writes each message (a fixed header of int64 words, then a payload: a step's packed inputs or
its bitmask rows) once into the next of K slots of one shared-memory block and posts every worker's
`ready` semaphore; a worker copies what it needs out of the slot and posts its `space` semaphore.
Rank 0 takes one `space` token per worker before writing a slot, so a slot is rewritten only after
every worker has read it, and a worker that stops reading is found by a timeout on that wait (the
hand-off timeout). The semaphores are the only synchronisation: they order the slot's bytes on any
CPU architecture, and a worker with nothing to do sleeps in the kernel instead of spinning.

Measured against a torch.distributed (gloo) broadcast of the same messages on the CPU machine:
docs/tensor-parallel.md, "How a step reaches the workers" (benchmarks/tp_handoff.py).
"""

from __future__ import annotations

import os
import secrets
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from multiprocessing import shared_memory

import numpy as np

from ...core.errors import WorkerError

HEADER_WORDS = 16
HEADER_BYTES = HEADER_WORDS * 8
POLL_S = 0.05  # how often a blocked side re-checks its peers while it waits


class Op(IntEnum):
    LAUNCH = 1  # a step's packed inputs: enqueue its upload and forward
    FINALIZE = 2  # enqueue its sampling (payload: the bitmask rows when masked)
    BEGIN_RUN = 3  # a measured run starts: fresh timeline (arg: 1 = under nsys, rank 0 brackets)
    END_RUN = 4  # it ended: drain and send the timeline back
    CHECK_IDLE = 5  # nothing in flight: report
    SHUTDOWN = 6


class H(IntEnum):
    """Header word indices."""

    OP = 0
    STEP = 1
    SLOT = 2
    KIND = 3  # 0 decode, 1 prefill
    ROWS = 4
    BUCKET = 5  # -1: eager
    NBYTES = 6  # payload bytes
    TOKENS = 7
    ALL_GREEDY = 8
    ANY_TOP_K = 9
    ANY_TOP_P = 10
    MAX_TOP_K = 11
    MASKED = 12
    ARG = 13  # a control message's argument
    DEPTH = 14  # BEGIN_RUN: rank 0's pipeline depth (for the worker's timeline and step marks)


@dataclass
class RingSpec:
    """What a worker needs to attach (picklable: it travels to spawned processes)."""

    name: str
    slots: int
    capacity: int  # payload bytes per slot


class ShmRing:
    """One writer (rank 0), `len(ready)` readers (the workers, reader i = rank i + 1), K slots."""

    SLOTS = 8  # room for a few steps of lag; a worker normally reads each message at once

    def __init__(
        self,
        spec: RingSpec,
        ready: list,
        space: list,
        create: bool,
    ):
        self.spec, self.ready, self.space = spec, ready, space
        self.slot_bytes = HEADER_BYTES + -(-spec.capacity // 64) * 64
        size = spec.slots * self.slot_bytes
        self.shm = _create(spec.name, size) if create else _attach(spec.name)
        buf = np.ndarray((spec.slots, self.slot_bytes), np.uint8, self.shm.buf)
        self.headers = [row[:HEADER_BYTES].view(np.int64) for row in buf]
        self.payloads = [row[HEADER_BYTES:] for row in buf]
        self.sent = self.received = 0  # the writer's and this reader's message counts

    @staticmethod
    def make(capacity: int, ready: list, space: list) -> ShmRing:
        """A new ring (rank 0) over semaphores made before the workers were spawned: ready[i] starts
        at 0, space[i] at SLOTS."""
        name = f"bubblelab-tp-{os.getpid()}-{secrets.token_hex(4)}"
        return ShmRing(RingSpec(name, ShmRing.SLOTS, capacity), ready, space, create=True)

    # -- writer (rank 0) ---------------------------------------------------------------------------
    def send(
        self,
        header: np.ndarray,
        payload: np.ndarray | None,
        check: Callable[[int], None],
    ) -> None:
        """Write one message for every reader. check(reader) runs every POLL_S while a reader's slot
        is still unread: it raises when that reader died or has not read for the hand-off
        timeout."""
        for i, sem in enumerate(self.space):
            while not sem.acquire(timeout=POLL_S):
                check(i)
        k = self.sent % self.spec.slots
        n = 0 if payload is None else payload.nbytes
        if n > self.spec.capacity:
            raise WorkerError(
                f"hand-off message of {n} bytes exceeds the ring's {self.spec.capacity}"
            )
        if payload is not None and n:
            self.payloads[k][:n] = payload.reshape(-1).view(np.uint8)
        header[H.NBYTES] = n
        self.headers[k][:] = header
        self.sent += 1
        for sem in self.ready:
            sem.release()

    def backlog(self, reader: int) -> int:
        """Messages the reader has not finished yet (a hung rank has the largest)."""
        return self.spec.slots - self.space[reader].get_value()

    # -- reader (a worker) -------------------------------------------------------------------------
    def recv(
        self, reader: int, idle: Callable[[], None], spin_s: float = 0.0
    ) -> tuple[np.ndarray, np.ndarray]:
        """The next message: (header copy, payload view valid until release()). The reader spins up
        to spin_s first (waking a sleeping process costs the writer ~16 us and the reader more on
        the CPU machine, ~1 us while it spins), then sleeps, running idle() every POLL_S (a worker
        checks
        there that rank 0 is still alive)."""
        sem, deadline = self.ready[reader], time.perf_counter() + spin_s
        while not sem.acquire(False):
            if time.perf_counter() > deadline:
                while not sem.acquire(timeout=POLL_S):
                    idle()
                break
        k = self.received % self.spec.slots
        header = self.headers[k].copy()
        return header, self.payloads[k][: header[H.NBYTES]]

    def release(self, reader: int) -> None:
        """The reader is done with the current message's slot."""
        self.received += 1
        self.space[reader].release()

    def close(self, unlink: bool = False) -> None:
        self.headers = self.payloads = []
        try:
            self.shm.close()
            if unlink:
                self.shm.unlink()
        except (BufferError, FileNotFoundError):  # a view still alive, or already unlinked
            pass


def _create(name: str, size: int) -> shared_memory.SharedMemory:
    return shared_memory.SharedMemory(name=name, create=True, size=size)


def _attach(name: str) -> shared_memory.SharedMemory:
    """Attach without taking ownership: rank 0 unlinks the block. (Spawned workers share rank 0's
    resource tracker, so registering the name again is harmless; Python >= 3.13 skips it.)"""
    if sys.version_info >= (3, 13):
        return shared_memory.SharedMemory(name=name, track=False)
    return shared_memory.SharedMemory(name=name)
