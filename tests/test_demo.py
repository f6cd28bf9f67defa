"""`bubblelab demo`, the README's first command, end to end on the embedded model (a small
sweep)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]


def test_demo_answers_and_profiles(tmp_path):
    out = tmp_path / "demo run"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "bubblelab",
            "demo",
            "--streams",
            "1",
            "--output-len-mean",
            "4",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
        env={"COLUMNS": "120", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "A:" in result.stdout and "report:" in result.stdout
    runs = json.loads((out / "results.json").read_text())["runs"]
    assert sorted(r["depth"] for r in runs) == [1, 2]
    assert (out / "report.html").exists()
