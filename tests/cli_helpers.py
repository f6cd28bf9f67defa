"""The `bubblelab` command as a user runs it: a fresh process from the checkout root, bare PATH."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]


def run_bubblelab(
    *args: str, columns: int = 120, timeout: float = 120
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bubblelab", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"COLUMNS": str(columns), "PATH": "/usr/bin:/bin"},
        timeout=timeout,
    )
