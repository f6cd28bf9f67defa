"""Shared fixtures: tiny random-weight models (loaded once) and a helper to run requests to
completion."""

from __future__ import annotations

import datetime as dt
import os

import pytest
import torch

from bubblelab.runs.machine import revision_label
from tests.gpu_record import ROOT, last_gpu_run

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(
        reason="needs a CUDA GPU; results come from device runs recorded in the repo"
    )
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_report_header(config):
    """The CPU suite skips the GPU tests: say which recorded GPU run stands for them."""
    run = last_gpu_run()
    return run.summary() if run else "no recorded GPU run (docs/measurements/*/gpu-tests.xml)"


def pytest_terminal_summary(terminalreporter):
    if not torch.cuda.is_available():
        terminalreporter.write_line(pytest_report_header(None))


@pytest.fixture(scope="session", autouse=True)
def _gpu_run_record(record_testsuite_property):
    """On a CUDA machine, the JUnit XML (--junitxml) names the GPU, the commit and the date."""
    if not torch.cuda.is_available():
        return
    # .git-rev names a copied tree's revision, `+modified` if a file changed after the stamp
    rev = revision_label(ROOT)
    # a pair's record says so: the tests that need two GPUs ran only there
    n, name = torch.cuda.device_count(), torch.cuda.get_device_name()
    record_testsuite_property("gpu", f"{n}x {name}" if n > 1 else name)
    record_testsuite_property("commit", rev or "unknown")
    record_testsuite_property("date", dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))


@pytest.fixture(scope="session")
def tiny_llama():
    from bubblelab.engine.loader import load_model

    return load_model("tiny-llama", seed=1)


@pytest.fixture(scope="session")
def tiny_qwen3():
    from bubblelab.engine.loader import load_model

    return load_model("tiny-qwen3", seed=2)
