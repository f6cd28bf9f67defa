"""A sweep that stopped (an error, Ctrl-C): record why and which run was running, keep what
finished, and say how to report or resume it; a new sweep that finished nothing leaves nothing but
its logs, gathered in one file."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from ..core.errors import BubblelabError
from ..core.files import write_atomic
from . import state as run_state
from .repeats import unneeded


def record_stop(
    out_dir: Path, state: dict, e: BaseException, *, created: bool, say: Callable[[str], None]
) -> BubblelabError | None:
    """Record why the sweep stopped (the first planned run without a record was running) and keep
    what finished; a new sweep that finished nothing leaves nothing. Returns the one-line error to
    raise instead of a BubblelabError (a bug keeps its traceback)."""
    interrupted = isinstance(e, KeyboardInterrupt)
    reason = "interrupted" if interrupted else " ".join(str(e).split()) or type(e).__name__
    finished = run_state.finished_runs(out_dir)
    # The first planned run without a record was running (of those the repeat rule still wanted);
    # none: every run had finished and the results were being assembled.
    skipped = {f"plain/{tag}" for tag in unneeded(out_dir / "runs" / "plain")}
    running = next((r for r in state["planned"] if r not in finished and r not in skipped), None)
    failed = {"run": running, "error": reason}
    run_state.mark(out_dir, state, "interrupted" if interrupted else "failed", failed=failed)
    known = isinstance(e, BubblelabError)
    if not finished:
        if created:  # it leaves nothing, except what says why: its logs, kept in one file
            kept = keep_logs(out_dir)
            run_state.remove_sweep(out_dir)
            reason += f" (its logs: {kept})" if kept else ""
        return (
            BubblelabError(f"run {running} failed: {reason} (no run finished)") if known else None
        )
    what = f"run {running}" if running else "assembling the results"
    say(
        f"{what}: {reason}. {len(finished)} finished runs kept in {out_dir}: "
        f"`bubblelab report {out_dir}` reports them, "
        f"`bubblelab run-and-profile --resume {out_dir}` runs the rest"
    )
    if known:
        return BubblelabError(
            f"{what} failed: {reason} ({len(finished)} finished runs kept in {out_dir})"
        )
    return None


def keep_logs(out_dir: Path) -> Path | None:
    """Every log of a sweep about to be removed (nsys's, each pass's worker's), in one file in the
    temp folder, each under its path; None when there are none."""
    logs = sorted(out_dir.rglob("*.log"))
    if not logs:
        return None
    kept = (
        Path(tempfile.gettempdir())
        / f"bubblelab-{out_dir.name}-{time.strftime('%Y%m%d-%H%M%S')}.log"
    )
    write_atomic(
        kept,
        "".join(
            f"==> {log.relative_to(out_dir)} <==\n{log.read_text(errors='replace')}\n"
            for log in logs
        ),
    )
    return kept
