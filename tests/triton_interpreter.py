"""Triton kernels on the CPU: a test file runs itself again in a subprocess under Triton's
interpreter, which reads TRITON_INTERPRET when `@triton.jit` decorates (its own tl.* helpers
included, at `import triton`), so the variable must be set before anything imports triton. The
subprocess prints its results as one JSON line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
# Triton 3.6's interpreter (torch 2.11's, the GPU machine's) turns a loop bound that is a tensor
# into an index with int() of a one-element array, which NumPy 2 refuses ("only 0-dimensional
# arrays can be converted to Python scalars"): the GEMM, decode, prefill and sampler kernels stop
# on every case (the fused kernels pass, but are skipped with them). 3.9, the CPU install's, runs
# them all; 3.7 and 3.8 are untried.
INTERPRETER_SINCE = (3, 9)


def run_interpreted(test_file: str, cases: list, timeout: float = 300) -> Any:
    """`python test_file CASES_JSON` with TRITON_INTERPRET=1: the last line it printed, parsed."""
    triton = pytest.importorskip("triton")
    version = tuple(int(v) for v in triton.__version__.split(".")[:2])
    if version < INTERPRETER_SINCE and int(np.__version__.split(".")[0]) >= 2:
        pytest.skip(
            f"Triton {triton.__version__}'s interpreter with NumPy {np.__version__} stops on "
            "tensor loop bounds (tests/triton_interpreter.py); the CPU install's Triton 3.9 "
            "runs these, and the compiled kernels are the -m gpu tests"
        )
    # no GPU visible: the interpreted run is the CPU machine's wherever the tests run
    env = {
        **os.environ,
        "TRITON_INTERPRET": "1",
        "PYTHONPATH": str(ROOT),
        "CUDA_VISIBLE_DEVICES": "",
    }
    proc = subprocess.run(
        [sys.executable, test_file, json.dumps(cases)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def results_by_case(test_file: str, cases: list, timeout: float = 300) -> dict[tuple, dict]:
    """run_interpreted of a file whose main is serve_cases: each case's result, by the case."""
    return {tuple(r["case"]): r for r in run_interpreted(test_file, cases, timeout)}


def serve_cases(run: Callable[..., dict]) -> None:
    """The subprocess's side: run(*case) for each case of argv[1], printed as one JSON line; a case
    that raises is a result with its error, so one broken case does not hide the others."""
    results = []
    for case in json.loads(sys.argv[1]):
        try:
            results.append({"case": case, **run(*case)})
        except Exception as exc:  # noqa: BLE001 -- reported per case
            results.append({"case": case, "error": f"{type(exc).__name__}: {exc}"})
    print(json.dumps(results))
