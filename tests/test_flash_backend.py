"""The flash-attn backend's pure-Python parts (no flash-attn needed): which implementation it
takes."""

from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path

import pytest
import torch

from bubblelab.core.errors import BubblelabError
from bubblelab.engine.attention import AttentionMetadata
from bubblelab.engine.attention import flash_backend as fb

SHIM = Path(__file__).resolve().parents[1] / "tools" / "gpu_machine" / "flash_attn_shim"


def test_flash_backend_picks_fa4_then_fa2(monkeypatch):
    calls = []

    def fake_fa4(q, k, v, **kw):
        calls.append((q.shape, kw))
        return q.clone(), None

    monkeypatch.setattr(fb, "fa4_entry", lambda: fake_fa4)
    fa = fb.FlashAttention()
    assert (fa.impl, fa.block_size_multiple) == ("fa4", 1)
    meta = AttentionMetadata.for_prompts([3, 5])
    q, k = torch.randn(8, 4, 16, dtype=torch.bfloat16), torch.randn(8, 2, 16, dtype=torch.bfloat16)
    assert fa.forward(q, k, k, None, None, meta, 0.25).shape == q.shape
    assert calls[-1][1]["cu_seqlens_q"] is meta.cu_seqlens and calls[-1][1]["max_seqlen_k"] == 5
    assert calls[-1][1]["causal"] and calls[-1][1]["softmax_scale"] == 0.25
    dmeta = AttentionMetadata(
        is_prefill=False,
        context_lens=torch.tensor([3, 9], dtype=torch.int32),
        block_tables=torch.zeros(2, 4, dtype=torch.int32),
    )
    cache = torch.zeros(4, 16, 2, 16, dtype=torch.bfloat16)
    assert fa.forward(q[:2], None, None, cache, cache, dmeta, 0.25).shape == (2, 4, 16)
    assert calls[-1][0] == (2, 1, 4, 16)  # batched [B, 1, H, D] query
    assert (
        calls[-1][1]["seqused_k"] is dmeta.context_lens
        and calls[-1][1]["page_table"] is dmeta.block_tables
    )
    with pytest.raises(BubblelabError, match="bf16 or fp16"):
        fa.forward(q.float(), k.float(), k.float(), None, None, meta, 0.25)
    with pytest.raises(BubblelabError, match="head_dim"):
        fb.check_fa4_shapes(torch.zeros(1, 4, 12, dtype=torch.bfloat16), 2)

    monkeypatch.setattr(fb, "fa4_entry", lambda: None)
    monkeypatch.setattr(fb, "fa2_entries", lambda: (None, None))
    fa2 = fb.FlashAttention()
    assert (fa2.impl, fa2.block_size_multiple) == ("fa2", 256)
    with pytest.raises(BubblelabError, match="block_size % 256"):
        fa2.forward(q[:2], None, None, cache, cache, dmeta, 0.25)
    monkeypatch.setattr(fb, "fa2_entries", lambda: None)
    with pytest.raises(BubblelabError, match="neither flash-attn-4"):
        fb.FlashAttention()


@pytest.fixture
def restored_flash_attn_modules():
    """Whatever a test imports or fakes under the name flash_attn is gone afterwards."""
    before = {n: m for n, m in sys.modules.items() if n.split(".")[0] == "flash_attn"}
    yield
    for name in [n for n in sys.modules if n.split(".")[0] == "flash_attn"]:
        del sys.modules[name]
    sys.modules.update(before)


def test_flash_attn_shim_is_never_taken_for_fa2(monkeypatch, restored_flash_attn_modules):
    """tools/gpu_machine/flash_attn_shim is a `flash_attn` with the FA2 API but not FA2's kernels:
    with it importable as flash_attn, the engine finds no FA2."""
    monkeypatch.syspath_prepend(str(SHIM))
    for name in [n for n in sys.modules if n.split(".")[0] == "flash_attn"]:
        monkeypatch.delitem(sys.modules, name)
    shim = importlib.import_module("flash_attn")
    assert Path(shim.__file__).is_relative_to(SHIM) and hasattr(shim, "flash_attn_with_kvcache")
    entries = fb.fa2_entries()  # None here; a real FA2 beside the shim would be found, not the shim
    real = "flash_attn.flash_attn_interface"
    assert entries is None or all(f.__module__ == real for f in entries)


def test_a_real_fa2_is_taken(restored_flash_attn_modules):
    """FA2's own interface module (it loads the compiled kernels) is what marks a real FA2."""
    package, interface = (
        types.ModuleType("flash_attn"),
        types.ModuleType("flash_attn.flash_attn_interface"),
    )
    package.__path__ = []
    interface.flash_attn_varlen_func = lambda *a, **k: "varlen"
    interface.flash_attn_with_kvcache = lambda *a, **k: "kvcache"
    sys.modules.update({"flash_attn": package, "flash_attn.flash_attn_interface": interface})
    entries = fb.fa2_entries()
    assert entries == (interface.flash_attn_varlen_func, interface.flash_attn_with_kvcache)
