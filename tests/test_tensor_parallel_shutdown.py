"""Every way a tensor-parallel engine ends, on the CPU (gloo, two processes, tiny-llama): close(),
`with`, interpreter exit, an exception inside generate, SIGINT to the parent, Ctrl-C to the whole
process group, a worker killed mid-generate, and a script without the `__main__` guard. Each runs as
a fresh script with a timeout (testing/tp_shutdown.py), so a hang fails the test instead of CI.

Each must end within seconds with no worker left running, no /dev/shm entry of ours (the ring and
the named semaphores) and no leak reported by multiprocessing's resource tracker.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time

import pytest
import torch.distributed as dist

from bubblelab.core.errors import WorkerError
from testing import tp_shutdown
from tests.engine_helpers import make_tp_engine

OPTIONS = tp_shutdown.engine_options("cpu")
# From the moment the scenario ends the engine until the script and its workers have exited: two
# interpreters tearing torch down, one after the other, ~2 s each on this 2-core VM when it is idle
# and up to 5 s under a concurrent suite (3-13 s measured). A hang is a timeout or a kill at STOP_S.
TEARDOWN_S = 30.0


def check_nothing_left(out: tp_shutdown.Outcome) -> None:
    assert out.returncode is not None, f"{out.scenario}: still running at the timeout\n{out.stderr}"
    assert not out.left_running(), f"{out.scenario}: workers {out.left_running()} still running"
    assert not out.shm_left(), f"{out.scenario}: /dev/shm still holds {out.shm_left()}"
    assert "leaked" not in out.stderr, out.stderr  # the resource tracker had to clean up after us
    if "children" in out.reports:  # checked inside the script, right after the engine ended
        assert out.reports["children"] == 0 and out.reports["shm_left"] == [], out.reports


@pytest.mark.parametrize(
    "scenario", ["close", "with", "exit", "exception", "sigint", "ctrl-c", "kill"]
)
def test_every_shutdown_path_ends_every_worker_within_seconds(scenario, tmp_path):
    out = tp_shutdown.run(scenario, OPTIONS, tmp_path)
    check_nothing_left(out)
    assert (out.returncode == 0) == (scenario not in tp_shutdown.FAILS), out.stderr
    assert len(out.reports["pids"]) == 1 and len(out.reports["shm"]) == 6
    teardown = out.teardown_s()
    assert teardown is not None and teardown < TEARDOWN_S, (teardown, out.stderr)
    if scenario in ("close", "with", "exit", "exception"):  # the ranks were in step: clean
        assert out.reports["exitcodes"] == [0], "the worker did not leave by itself"
    if scenario in ("sigint", "ctrl-c"):  # in step or cut mid-step: either way, nothing left
        assert out.stderr.rstrip().endswith("KeyboardInterrupt"), out.stderr
    if scenario == "exception":
        assert out.reports["error"] == "boom"
    if scenario == "kill":  # generate raised one line naming the rank and how it ended
        error = out.reports["error"]
        assert error.startswith("WorkerError: tensor-parallel worker failed: rank 1 (pid ")
        assert "was killed by SIGKILL" in error and "\n" not in error
        assert out.reports["raised"] - out.reports["done"] < OPTIONS["tensor_parallel_timeout_s"]


def test_a_script_without_the_main_guard_fails_fast_naming_the_rule(tmp_path):
    """Each spawned worker re-runs the script's module level: it stops at once (exit code
    MAIN_GUARD_EXIT) and rank 0, waiting for the worker's first word, raises one line with the
    rule instead of waiting for ever."""
    out = tp_shutdown.run("noguard", OPTIONS, tmp_path, timeout_s=120)
    check_nothing_left(out)
    assert out.returncode == 1
    last = out.stderr.rstrip().splitlines()[-1]
    assert last.startswith("bubblelab.core.errors.WorkerError: tensor-parallel worker failed: ")
    assert "rank 1" in last and "stopped at start" in last
    assert 'must build the LLM under `if __name__ == "__main__":`' in last
    assert "pids" not in out.reports  # the parent never got as far as an engine


@pytest.mark.parametrize("when", ["before its first word", "after joining the group"])
def test_a_worker_that_dies_during_init_fails_the_engine_in_one_line(when, monkeypatch):
    """Killed while rank 0 waits for its first word, or once both joined the process group (rank 0
    then meets the dead peer in the KV sizing's collective): the engine's constructor raises one
    WorkerError naming the rank, nothing is left, and the process can start another engine."""
    from bubblelab.engine.distributed import workers as tp

    def kill_workers() -> None:
        for proc in mp.active_children():
            if proc.pid is not None:  # started: a child has its pid
                os.kill(proc.pid, signal.SIGKILL)

    if when == "before its first word":
        replies = tp.TPWorkers._replies

        def first_word(self, kind, timeout_s):
            if kind == "hello":
                kill_workers()
            return replies(self, kind, timeout_s)

        monkeypatch.setattr(tp.TPWorkers, "_replies", first_word)
    else:
        init_group = tp.init_group

        def join_then_die(*args):
            init_group(*args)
            kill_workers()

        monkeypatch.setattr(tp, "init_group", join_then_die)
    started = time.monotonic()
    with pytest.raises(WorkerError) as failure:
        make_tp_engine("tiny-llama", 1, tensor_parallel_timeout_s=5.0)
    took = time.monotonic() - started
    message = str(failure.value)
    assert message.startswith("tensor-parallel worker failed: rank 1 (pid ")
    assert "was killed by SIGKILL" in message and "\n" not in message
    assert took < 30, took  # (most of it is loading; a missed death waits 15 minutes)
    assert not mp.active_children() and not dist.is_initialized()
    monkeypatch.undo()
    engine = make_tp_engine("tiny-llama", 1)  # the process is free to start another
    engine.close()
    assert not mp.active_children()


def test_ctrl_c_inside_a_steps_send_reaches_the_caller_and_the_engine_only_closes():
    """Ctrl-C landing while rank 0 writes a step's inputs to the ring (the race the ctrl-c scenario
    hits now and then): cancel, as generate calls it, must not replace the KeyboardInterrupt with a
    reset's refusal; the engine then refuses further steps in one line and closes cleanly."""
    from bubblelab.engine.sampling_params import SamplingParams

    engine = make_tp_engine("tiny-llama", 1)
    try:
        params = SamplingParams(max_tokens=16, ignore_eos=True)
        engine.add_requests([("a", list(range(3, 12)), params), ("b", list(range(5, 9)), params)])
        engine.step()
        ring = engine.workers.ring
        send = ring.send

        def interrupted(*args):
            ring.send = send
            raise KeyboardInterrupt

        ring.send = interrupted
        with pytest.raises(KeyboardInterrupt):
            while engine.has_unfinished():
                engine.step()
        engine.cancel(["a", "b"])  # must not raise
        assert not engine.seqs
        engine.add_request("c", list(range(3, 7)), params)
        with pytest.raises(WorkerError, match="step was cut short: the engine can only close"):
            engine.step()
    finally:
        engine.close()
    assert not mp.active_children()
