"""A run's record: RUN_DIR/<tag>.json.gz, written whole by the worker once the run has finished.

It holds the run's summary, its in-process timeline (host ranges, device intervals, step infos),
its requests and, under tensor parallelism, ranks 1..N-1's timelines (`ranks`). Gzipped: a record
is mostly the timeline's ranges, which compress ~7x, and a sweep writes one per run. Sweeps before
this kept RUN_DIR/<tag>.json; both are read. No torch here: assembling and reporting a sweep that
was copied off the GPU machine needs none.
"""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path

from ..core.files import write_atomic
from ..core.timeline import StepInfo, Timeline

SUFFIX = ".json.gz"
OLD_SUFFIX = ".json"  # sweeps before records were gzipped
PASS_FILES = ("plan.json", "worker.json", "repeats.json")  # a pass's own files, never a record


def record_path(run_dir: Path, tag: str) -> Path:
    """Where the worker writes the record of run `tag`."""
    return Path(run_dir) / f"{tag}{SUFFIX}"


def find_record(run_dir: Path, tag: str) -> Path | None:
    """The record of run `tag` if there is one (gzipped, or as older sweeps kept it)."""
    for path in (record_path(run_dir, tag), Path(run_dir) / f"{tag}{OLD_SUFFIX}"):
        if path.is_file():
            return path
    return None


def records_in(pass_dir: Path) -> list[Path]:
    """Every record file of a pass's directory, in name order."""
    found = [*Path(pass_dir).glob(f"*{SUFFIX}"), *Path(pass_dir).glob(f"*{OLD_SUFFIX}")]
    return sorted(p for p in found if p.name not in PASS_FILES)


def tag_of(path: Path) -> str:
    return path.name.removesuffix(SUFFIX).removesuffix(OLD_SUFFIX)


def write_record(run_dir: Path, tag: str, record: dict) -> Path:
    """Write the record whole (write_atomic): it is there or not, never half written."""
    # Level 1: a record is written between timed runs, where every millisecond is the sweep's.
    data = gzip.compress(json.dumps(record).encode(), compresslevel=1, mtime=0)
    return write_atomic(record_path(run_dir, tag), data)


def load_record(path: Path) -> dict:
    """A record file's document; raises OSError (unreadable) or ValueError (damaged: cut short,
    corrupt, not JSON)."""
    data = Path(path).read_bytes()
    try:
        return json.loads(gzip.decompress(data) if path.name.endswith(".gz") else data)
    except (EOFError, zlib.error, gzip.BadGzipFile, ValueError) as e:  # ValueError: not JSON
        raise ValueError(f"{path.name} is damaged: {e}") from None


def read_record(run_dir: Path, tag: str) -> dict:
    path = find_record(run_dir, tag)
    if path is None:
        raise FileNotFoundError(record_path(run_dir, tag))
    return load_record(path)


def timeline_dict(t: Timeline) -> dict:
    """A timeline as the record keeps it."""
    return {
        "depth": t.depth,
        "host": t.host,
        "device": t.device,
        "steps": [vars(s) for s in t.steps.values()],
    }


def timeline_from_record(record: dict) -> Timeline:
    """Rank 0's timeline (the only one on one GPU)."""
    tl = record["timeline"]
    t = Timeline(
        depth=tl["depth"],
        host=[tuple(r) for r in tl["host"]],
        device=[tuple(r) for r in tl["device"]],
    )
    for s in tl["steps"]:
        t.add_step(StepInfo(**s))
    return t


def rank_timelines_from_record(record: dict) -> list[Timeline]:
    """Ranks 1..N-1's timelines of a tensor-parallel run (empty for one GPU)."""
    return [timeline_from_record({"timeline": t}) for t in record.get("ranks", [])]
