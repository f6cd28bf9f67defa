"""Analysing a trace and predicting from a results file need no GPU stack: in a fresh interpreter
with torch blocked (and duckdb, for the cost model and core), these modules import, load neither the
blocked packages nor the engine, and pull in only the light table stack (numpy, pandas, pyarrow): no
plotting, no templates, no compiler. That is what keeps them quick; the time itself is printed, not
asserted, since a cold disk cache on a shared CI machine alone makes it vary 0.4-2 s. pyproject's
import-linter contracts say the same of every module; this is what a user on a laptop without CUDA
sees."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# Run in a fresh interpreter: a finder ahead of every other refuses the blocked packages, as if they
# were not installed; then the module is imported and timed.
CHILD = """
import importlib, importlib.abc, json, sys, time

blocked = set(sys.argv[2].split(","))


class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in blocked:
            raise ModuleNotFoundError(f"{name} is blocked", name=name)
        return None


sys.meta_path.insert(0, Blocked())
start = time.perf_counter()
importlib.import_module(sys.argv[1])
seconds = time.perf_counter() - start
watched = ("torch", "duckdb", "bubblelab.engine", "bubblelab.profiling")
third_party = {
    m.partition(".")[0] for m in sys.modules if not m.startswith("_")
} - set(sys.stdlib_module_names) - {"bubblelab"}
print(json.dumps({
    "seconds": seconds,
    "loaded": sorted(m for m in sys.modules if m in watched),
    "third_party": sorted(third_party),
}))
"""
TORCH_AND_DUCKDB = "torch,duckdb"
# pandas and what it brings; anything past these (matplotlib, scipy, jinja2, triton, ...) is a heavy
# import that crept in.
LIGHT = {"numpy", "pandas", "pyarrow", "dateutil", "pytz", "tzdata", "six", "cython_runtime"}


@pytest.mark.parametrize(
    ("module", "blocked", "allowed", "light"),
    [
        # The cost model reads tables: no torch, no DuckDB, no profiling, no engine.
        ("bubblelab.costmodel.predict", TORCH_AND_DUCKDB, [], LIGHT),
        # Analysis runs DuckDB over a trace's catalog, still without torch or the engine.
        (
            "bubblelab.profiling.analysis",
            "torch",
            ["bubblelab.profiling", "duckdb"],
            LIGHT | {"duckdb"},
        ),
        ("bubblelab.core.contract", TORCH_AND_DUCKDB, [], set()),
        ("bubblelab.core.steady", TORCH_AND_DUCKDB, [], LIGHT),
    ],
)
def test_imports_without_torch(module, blocked, allowed, light):
    done = subprocess.run(
        [sys.executable, "-c", CHILD, module, blocked], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.splitlines()[-1])
    print(f"import {module} with {blocked} blocked: {found['seconds']:.2f} s")
    assert found["loaded"] == allowed
    assert set(found["third_party"]) <= light, sorted(set(found["third_party"]) - light)


def test_sweep_process_imports_no_engine():
    """On the GPU the sweep's own process only launches workers (runs.passes): it loads no model
    code, Triton or transformers, whose imports are seconds on the sweep's critical path there.
    torch stays: the options are checked against the machine (CUDA present) before any run."""
    done = subprocess.run(
        [sys.executable, "-c", CHILD, "bubblelab.runs.sweep", "triton,transformers,tokenizers"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.splitlines()[-1])
    print(f"import bubblelab.runs.sweep: {found['seconds']:.2f} s")
    assert "bubblelab.engine" in found["loaded"]  # engine.config, for the options' checks
    assert not {"triton", "transformers", "tokenizers"} & set(found["third_party"])
