"""Shared fixtures: tiny random-weight models (loaded once) and a helper to run requests to
completion."""

from __future__ import annotations

import os

import pytest
import torch

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


@pytest.fixture(scope="session")
def tiny_llama():
    from bubblelab.engine.loader import load_model

    return load_model("tiny-llama", seed=1)


@pytest.fixture(scope="session")
def tiny_qwen3():
    from bubblelab.engine.loader import load_model

    return load_model("tiny-qwen3", seed=2)
