"""Every file bubblelab writes goes through `write_atomic`: readers see the old file or the whole
new one, never half of either, and an interrupted write leaves the old file as it was.

`check_output_path` runs before any work, so a bad output path fails in a second, not after the run.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .errors import BubblelabError


def write_atomic(path: Path | str, content: str | bytes | Callable[[Path], object]) -> Path:
    """Write `content` to `path` through a temporary name in the same folder, then rename it.

    content: text (UTF-8), bytes, or a function that writes the file at the path it is given (for
    writers that need a file name: DuckDB, Parquet, matplotlib). It writes into a private temporary
    folder, so its side files (a DuckDB .wal) never land beside `path`.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=path.parent, prefix=f".{path.name}.") as tmp:
            partial = Path(tmp) / path.name
            if callable(content):
                content(partial)
                if not partial.is_file():
                    raise BubblelabError(f"nothing was written for {path}")
            else:
                data = content.encode("utf-8") if isinstance(content, str) else content
                with open(partial, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())  # the data is on disk before the name points at it
            os.replace(partial, path)
    except OSError as e:
        raise BubblelabError(f"cannot write {path}: {e.strerror or e}") from None
    return path


def check_output_path(path: Path | str, option: str) -> Path:
    """A file we may create or replace: not a folder, in a folder that exists or can be made and is
    writable. `option` names where the path came from (`--json`) for the one-line error."""
    path = Path(path)
    if path.is_dir():
        raise BubblelabError(f"{option} {path} is a directory; give a file name")
    _check_parent(path, path.parent, option)
    return path


def _check_parent(path: Path, parent: Path, option: str) -> None:
    """The nearest existing folder at or above `parent` is a folder we can write into."""
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise BubblelabError(f"{option} {path}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise BubblelabError(f"{option} {path}: {parent} is not writable")


def check_output_dir(path: Path | str, option: str) -> Path:
    """A folder we may write files into: an existing folder, or one that can be made."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise BubblelabError(f"{option} {path} is a file; give a folder")
    _check_parent(path, path, option)
    return path


def map_files(work: Callable, items: Iterable) -> list:
    """work(item) for each item, in threads, one a CPU at most: file work (an nsys export, a gzip, a
    trace cut) spends its time in other processes or in C, so threads run it side by side."""
    items = list(items)
    with ThreadPoolExecutor(max(1, min(len(items), os.cpu_count() or 1))) as pool:
        return list(pool.map(work, items))
