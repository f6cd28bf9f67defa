"""Every file the report and the exports write goes through `write_atomic`: a reader sees the old
file or the whole new one, never half of either.

(Interim: the CLI's owner brings the project-wide helper of this name and signature; this one
gives way to it.)
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from bubblelab.errors import BubblelabError


def write_atomic(path: Path | str, content: str | bytes | Callable[[Path], object]) -> Path:
    """Write `content` (text as UTF-8, bytes, or a function that writes the file at the path it is
    given) under a temporary name in the same folder, then rename it onto `path`."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=path.parent, prefix=f".{path.name}.") as tmp:
            partial = Path(tmp) / path.name
            if callable(content):
                content(partial)
            else:
                partial.write_bytes(content.encode() if isinstance(content, str) else content)
            os.replace(partial, path)
    except OSError as e:
        raise BubblelabError(f"cannot write {path}: {e.strerror or e}") from None
    return path
