"""A sweep's worker on a preset (seeded random weights, no tokenizer) never imports transformers,
which takes seconds of every worker process's start (the nsys pass's is on the sweep's critical
path): it is imported only where a checkpoint's tokenizer is built."""

from __future__ import annotations

import subprocess
import sys

CHILD = """
import importlib.abc, sys


class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "transformers":
            raise ModuleNotFoundError(f"{name} is blocked", name=name)
        return None


sys.meta_path.insert(0, Blocked())
import bubblelab.runs.worker
from bubblelab.engine.loader import load_model

loaded = load_model("tiny-llama", dtype="fp32", device="cpu", seed=0, attention_backend="auto")
print(loaded.tokenizer, loaded.source)
"""


def test_a_presets_worker_runs_without_transformers():
    done = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["None", "preset"]
