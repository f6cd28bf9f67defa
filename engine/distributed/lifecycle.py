"""How tensor-parallel processes start and end: the rules that make every path finish in seconds.

Starting. Workers are spawned, so each re-imports the user's main module; a script that builds the
LLM at module level, without the `if __name__ == "__main__":` guard, would have every worker build
one again. A worker in that state stops at once with MAIN_GUARD_EXIT (refuse_unguarded_main) and
rank 0, which waits for every worker's first word before it joins the process group, names the rule.

Ending. Three things can make a teardown wait forever, so the order is fixed (TPWorkers.close):
- NCCL (>= 2.26) destroys or aborts a communicator only once every CUDA graph that captured one of
  its collectives is gone: it polls until then, without a timeout. The decode and prefill graphs
  hold the all-reduces, so every rank releases its graphs before it leaves the group.
- A rank that leaves while a peer still needs it for a collective of the last steps, or a peer
  blocked in a collective that rank 0 never joins (a step cut in half by an exception or Ctrl-C),
  waits for ever. The ranks leave cleanly only when they are in step and every rank's device work
  has drained; otherwise the workers are killed first and rank 0 aborts the group.
- NCCL's destroy is collective: every rank must be in it at the same time. After SHUTDOWN the
  workers and rank 0 leave together (rank 0 waiting for the workers' `left` before leaving itself
  held both sides until their deadlines, 10 s, on two H200s).
- What rank 0 cannot bound itself (a destroy inside NCCL) runs on a helper thread with a deadline,
  so close() returns and the interpreter can exit.
"""

from __future__ import annotations

import multiprocessing as mp
import signal
import sys
import threading
from collections.abc import Callable

from ..cuda_graphs import CudaGraphs

# How long workers get to leave after SHUTDOWN (and rank 0 to leave the group) before the kill.
STOP_S = 10.0
# A worker's exit code when it found itself re-running an unguarded script's module level.
MAIN_GUARD_EXIT = 86
MAIN_GUARD_RULE = (
    "a script that starts tensor-parallel workers must build the LLM under "
    '`if __name__ == "__main__":` (each worker re-imports the main module)'
)


def refuse_unguarded_main() -> None:
    """Called before spawning workers: in a spawned process that is still importing the parent's
    main module (multiprocessing marks it `_inheriting`), the script has no main guard. Stop here
    with MAIN_GUARD_EXIT, which rank 0 turns into a WorkerError naming the rule, rather than let
    multiprocessing raise its own error from deep inside the worker's start."""
    if getattr(mp.current_process(), "_inheriting", False):
        print(f"bubblelab: {MAIN_GUARD_RULE}", file=sys.stderr, flush=True)
        raise SystemExit(MAIN_GUARD_EXIT)


def exit_text(code: int) -> str:
    """How a worker ended, for a one-line WorkerError."""
    if code == MAIN_GUARD_EXIT:
        return f"stopped at start: {MAIN_GUARD_RULE}"
    if code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"


def release_graphs(graphs: CudaGraphs) -> None:
    """Free every captured graph now (NCCL destroys a communicator only after the graphs that
    captured its collectives). A graph still running is freed when it completes."""
    tables: list[dict] = [*graphs.decode_graphs, *graphs.sample_graphs, *graphs.prefill_graphs]
    for table in tables:
        for graph in table.values():
            graph.reset()
        table.clear()


def within(seconds: float, fn: Callable[[], None]) -> bool:
    """Run fn on a daemon thread and wait up to `seconds`: False if it has not returned (it is
    abandoned; what it raised is re-raised)."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            errors.append(e)

    thread = threading.Thread(target=run, name="bubblelab-teardown", daemon=True)
    try:
        thread.start()
    except RuntimeError:  # no new threads this late in interpreter shutdown: run it here
        run()
    else:
        thread.join(seconds)
    if errors:
        raise errors[0]
    return not thread.is_alive()
