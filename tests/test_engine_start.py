"""A fast engine start (engine.start): every process's Triton kernels in one cache, so a process
that follows a cold one finds the kernels it built, wherever Inductor would have sent them; and the
slow imports made ahead, while a worker waits for the GPU."""

from __future__ import annotations

import os
import sys
from importlib.util import resolve_name
from pathlib import Path

from torch._inductor.runtime.cache_dir_utils import cache_dir

from bubblelab.engine.start import AHEAD, import_ahead, share_triton_cache


def test_unset_it_becomes_inductors_directory_for_the_device(monkeypatch):
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    chosen = share_triton_cache(1)
    assert Path(chosen) == Path(cache_dir()) / "triton" / "1"
    assert os.environ["TRITON_CACHE_DIR"] == chosen
    # Set once: a later call (another runner in the process) keeps it.
    assert share_triton_cache(0) == chosen


def test_a_users_setting_is_kept(monkeypatch, tmp_path):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    assert share_triton_cache(0) == str(tmp_path)
    assert os.environ["TRITON_CACHE_DIR"] == str(tmp_path)


def test_imports_ahead_only_for_cuda():
    assert import_ahead("cpu") == []
    # This machine has Triton but no GPU: every module imports; the engine's own ones by full name.
    assert import_ahead("cuda") == []
    assert {resolve_name(name, "bubblelab.engine") for name in AHEAD} <= set(sys.modules)
