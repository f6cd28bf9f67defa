"""Every way a tensor-parallel engine ends, on the CPU (gloo, two processes, tiny-llama): close(),
`with`, interpreter exit, an exception inside generate, SIGINT to the parent, Ctrl-C to the whole
process group, a worker killed mid-generate, and a script without the `__main__` guard. Each runs as
a fresh script with a timeout (testing/tp_shutdown.py), so a hang fails the test instead of CI.

Each must end within seconds with no worker left running, no /dev/shm entry of ours (the ring and
the named semaphores) and no leak reported by multiprocessing's resource tracker.
"""

from __future__ import annotations

import pytest

from testing import tp_shutdown

OPTIONS = dict(model="tiny-llama", seed=1, tensor_parallel=2, tensor_parallel_timeout_s=5.0,
               max_num_seqs=4, max_model_len=128, block_size=4, num_kv_blocks=128)  # fmt: skip
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
