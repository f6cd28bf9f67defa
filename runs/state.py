"""A sweep's run directory over its life, and the rules that keep its results safe.

- A run is finished when its record DIR/runs/<pass>/<tag>.json.gz exists: the worker writes it whole
  (write_atomic) after the run, so a crash, Ctrl-C or a dying profiler never half-finishes one.
- DIR/sweep.json holds the sweep's options (asdict(SweepSpec)); DIR/status.json how it profiles,
  the runs it plans, and how it stands (running, interrupted, failed with the run and the reason,
  complete).
- An existing run directory is touched only when asked: `resume` runs what is missing with the
  saved options, `force` replaces bubblelab's files (and only those) with a new sweep.
- One sweep at a time writes a run directory: it holds an flock on DIR/.lock (with its pid in it)
  from open_run_dir to mark; the kernel drops it with the process, so a killed sweep leaves none.
- catalog.duckdb, results.json and report.html are derived from the finished runs
  (bubblelab.runs.assemble), so they can always be rebuilt from what finished.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..core.errors import BubblelabError
from ..core.files import check_output_dir, write_atomic
from .record import load_record, records_in, tag_of

SPEC_FILE = "sweep.json"
STATE_FILE = "status.json"
STATE_VERSION = 1
# Everything a sweep puts in its directory: what --force removes, and what marks a run directory.
OURS = (
    SPEC_FILE,
    STATE_FILE,
    "runs",
    "traces",
    "catalog.duckdb",
    "timeline.duckdb",
    "results.json",
    "results.json.gz",
    "report.html",
    "export",  # the report's trace and Parquet tables
)


LOCK_FILE = ".lock"  # never removed while a sweep may wait on it: removing it races the next one
_held: dict[Path, int] = {}  # run directory -> the open lock file this process holds


@contextmanager
def lock_run_dir(run_dir: Path) -> Iterator[None]:
    """Hold the run directory's lock for the block (it must exist)."""
    acquire(run_dir)
    try:
        yield
    finally:
        release(run_dir)


def acquire(run_dir: Path) -> None:
    """Take the run directory's lock, or say which process holds it."""
    fd = os.open(run_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise _in_use(run_dir) from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    _held[run_dir.resolve()] = fd


def release(run_dir: Path) -> None:
    if (fd := _held.pop(run_dir.resolve(), None)) is not None:
        os.close(fd)


def check_unlocked(run_dir: Path) -> None:
    """Refuse a run directory another sweep holds, without writing anything."""
    try:
        fd = os.open(run_dir / LOCK_FILE, os.O_RDONLY)
    except OSError:  # no lock file: no sweep has held it
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        raise _in_use(run_dir) from None
    finally:
        os.close(fd)


def _in_use(run_dir: Path) -> BubblelabError:
    try:
        pid = (run_dir / LOCK_FILE).read_text().strip() or "unknown"
    except OSError:
        pid = "unknown"
    return BubblelabError(
        f"{run_dir} is in use by another sweep (pid {pid}): wait for it to end, or choose "
        "another --out"
    )


def finished_runs(run_dir: Path) -> set[str]:
    """The finished runs, as "<pass>/<tag>": those with a whole record."""
    return {f"{p.parent.name}/{tag_of(p)}" for p in _records(run_dir) if _whole(p)}


def damaged_runs(run_dir: Path) -> list[Path]:
    """Records that are there but not whole: cut by a full disk or a bad copy (write_atomic never
    leaves one half written). Not finished: `report` skips them, `--resume` runs them again."""
    return [p for p in _records(run_dir) if not _whole(p)]


def set_aside_damaged(run_dir: Path) -> list[Path]:
    """Remove the damaged records, so that a resumed sweep runs them again; returns them."""
    damaged = damaged_runs(run_dir)
    for record in damaged:
        record.unlink()
    return damaged


def _records(run_dir: Path) -> list[Path]:
    """runs/<pass>/<tag>.json.gz (bubblelab.runs.record; a hidden folder is what a killed
    write_atomic left, never a pass)."""
    runs = run_dir / "runs"
    if not runs.is_dir():
        return []
    passes = [d for d in runs.iterdir() if d.is_dir() and not d.name.startswith(".")]
    return sorted(p for d in passes for p in records_in(d))


def _whole(record: Path) -> bool:
    try:
        doc = load_record(record)
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and "summary" in doc


def holds_run(run_dir: Path) -> bool:
    return run_dir.is_dir() and any((run_dir / name).exists() for name in OURS)


OPTIONS_BEFORE_THEY_EXISTED = {"out_of_reach": False, "processes": 1}


def read_state(run_dir: Path) -> dict[str, Any] | None:
    """DIR/status.json with the options of DIR/sweep.json under "spec"; None where there is no
    sweep (a run directory made by write_results directly, or before these files existed)."""
    if not (run_dir / STATE_FILE).is_file():
        return None
    state, spec = read_json(run_dir / STATE_FILE), read_json(run_dir / SPEC_FILE)
    if state.get("version") != STATE_VERSION:
        raise BubblelabError(
            f"{run_dir / STATE_FILE} was not written by this bubblelab (version {STATE_VERSION})"
        )
    # Options added since: a sweep saved before one existed ran without it.
    return {**state, "spec": {**OPTIONS_BEFORE_THEY_EXISTED, **spec}}


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from a file of the run directory; anything else is one line naming it."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BubblelabError(f"{path} is not valid JSON ({e})") from None
    if not isinstance(doc, dict):
        raise BubblelabError(f"{path} is not a JSON object")
    return doc


def record_timing(run_dir: Path, name: str, wall_s: float) -> dict[str, Any]:
    """Add a part's wall time to the sweep's timings (runs/timings.json, which results.json's
    provenance copies when the sweep is assembled); returns them all."""
    path = run_dir / "runs" / "timings.json"
    timings = read_json(path) if path.is_file() else {}
    timings[name] = {"wall_s": wall_s}
    write_atomic(path, json.dumps(timings, indent=1))
    return timings


def time_line(timings: dict[str, Any], total_s: float) -> str:
    """Where a sweep's time went, in one line: what came before its runs (the interpreter, the
    imports, the checks; the demo's chat), its passes (which overlap), the assembly, the report,
    the rest (the prediction tables)."""
    parts = [("before the runs", "startup"), ("runs", "passes"), ("assembly", "assemble"),
             ("report and exports", "report")]  # fmt: skip
    known = [(label, timings[key]["wall_s"]) for label, key in parts if key in timings]
    rest = total_s - sum(s for _, s in known)
    said = ", ".join(f"{label} {s:.0f} s" for label, s in known)
    return f"took {total_s:.0f} s: {said}, the rest {rest:.0f} s (the tables)"


def write_state(run_dir: Path, state: dict[str, Any]) -> None:
    """status.json (the options in sweep.json are written once, when the sweep begins)."""
    status = {k: v for k, v in state.items() if k != "spec"}
    write_atomic(run_dir / STATE_FILE, json.dumps(status, indent=1) + "\n")


def open_run_dir(
    run_dir: Path,
    spec: dict,
    planned: list[str],
    profiler: str,
    *,
    resume: bool = False,
    force: bool = False,
) -> dict[str, Any]:
    """Check the output directory before any work, make it ready, and return its state.

    New or empty: a fresh sweep. Holding a sweep: only with resume (the same options and profiler)
    or force (bubblelab's files removed first). Anything else is refused in one line.
    """
    if resume and force:
        raise BubblelabError("give --resume or --force, not both")
    if resume:
        state = _resumable(run_dir, spec, profiler)
    else:
        check_new_run_dir(run_dir, force=force)
        run_dir.mkdir(parents=True, exist_ok=True)
    acquire(run_dir)  # refusals come first, so they write nothing; released by mark()
    try:
        if resume:
            state.update(status="running", failed=None)
            write_state(run_dir, state)
            return state
        return _new(run_dir, spec, planned, profiler, force)
    except BaseException:
        release(run_dir)
        raise


def _resumable(run_dir: Path, spec: dict, profiler: str) -> dict[str, Any]:
    """The saved state of a sweep this one may continue: the same options and profiler."""
    state = read_state(run_dir)
    if state is None:
        raise BubblelabError(f"{run_dir} holds no sweep to resume (no {STATE_FILE})")
    if state["spec"] != spec:
        changed = sorted(
            k for k in {**spec, **state["spec"]} if spec.get(k) != state["spec"].get(k)
        )
        raise BubblelabError(
            f"{run_dir} was swept with other options ({', '.join(changed)}); "
            "resume it with its own, or give --force to replace it"
        )
    if state["profiler"] != profiler:
        raise BubblelabError(
            f"{run_dir} was profiled with {state['profiler']}, this sweep would use {profiler}"
        )
    return state


def _new(
    run_dir: Path, spec: dict, planned: list[str], profiler: str, force: bool
) -> dict[str, Any]:
    if force:
        _remove_ours(run_dir)
    write_atomic(run_dir / SPEC_FILE, json.dumps(spec, indent=1) + "\n")
    state = {
        "version": STATE_VERSION,
        "spec": spec,
        "planned": planned,  # the runs' tags, in the order they run
        "profiler": profiler,
        "command": " ".join(sys.argv),
        "started_at": time.strftime("%Y-%m-%d %H:%M:%S"),
        "status": "running",
        "failed": None,
    }
    write_state(run_dir, state)
    return state


def check_new_run_dir(run_dir: Path, *, force: bool = False) -> None:
    """Refuse, before any work, an output directory a new sweep may not write: a file, a folder of
    other files, one another sweep holds, one that cannot be written, or (without force) one
    that already holds a run."""
    if run_dir.exists() and not run_dir.is_dir():
        raise BubblelabError(f"{run_dir} is a file, not a run directory")
    check_unlocked(run_dir)
    check_output_dir(run_dir, "--out")
    if holds_run(run_dir):
        if not force:
            raise BubblelabError(
                f"{run_dir} already holds a run: --resume {run_dir} finishes it, --force "
                "replaces it, or choose another --out"
            )
    elif run_dir.is_dir() and any(p.name != LOCK_FILE for p in run_dir.iterdir()):
        raise BubblelabError(
            f"{run_dir} is not empty and holds no bubblelab run: choose another --out"
        )


def _remove_ours(run_dir: Path) -> None:
    for name in OURS:
        target = run_dir / name
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()


def mark(run_dir: Path, state: dict[str, Any], status: str, **facts: Any) -> None:
    """Record how the sweep ended (complete, interrupted, failed) and why."""
    state.update(status=status, **facts)
    write_state(run_dir, state)
    release(run_dir)


def clear_pass(run_dir: Path, name: str) -> None:
    """Forget a pass's records (and, for the nsys pass, its reports) to run it again whole."""
    for target in (run_dir / "runs" / name, run_dir / "traces" if name == "nsys" else None):
        if target is not None and target.is_dir():
            shutil.rmtree(target)


def remove_sweep(run_dir: Path) -> None:
    """A new sweep that finished no run leaves nothing behind: its files and its folder."""
    _remove_ours(run_dir)
    release(run_dir)
    (run_dir / LOCK_FILE).unlink(missing_ok=True)  # it made the folder: it takes the lock with it
    if run_dir.is_dir() and not any(run_dir.iterdir()):
        run_dir.rmdir()
