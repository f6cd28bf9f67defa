"""Batched prefill attention (one call per layer) against the per-sequence SDPA loop it replaced."""

from __future__ import annotations

import pytest
import torch

from bubblelab.engine.attention import prefill
from bubblelab.engine.attention.metadata import AttentionMetadata
from bubblelab.engine.loader import load_model

MIXED = [5, 1, 17, 11, 1, 32]  # lengths 1 included; padded work ratio > 1.5: the loop on CPU
ALIKE = [16, 16, 15, 16, 1]  # ratio < 1.5: one padded call on CPU


def qkv(
    lens: list[int],
    heads: int,
    kv_heads: int,
    head_dim: int,
    dtype=torch.float32,
    device="cpu",
    seed=0,
):
    g = torch.Generator().manual_seed(seed)
    n = sum(lens)
    return [
        torch.randn(n, h, head_dim, generator=g).to(device, dtype)
        for h in (heads, kv_heads, kv_heads)
    ]


def test_padded_index_places_each_token_at_its_row_and_position():
    meta = AttentionMetadata.for_prompts([3, 1, 2])
    assert meta.padded_index().tolist() == [0, 1, 2, 3, 6, 7]
    assert meta.padded_index() is meta.padded_index()  # built once per step, reused by every layer


@pytest.mark.parametrize("lens", [MIXED, ALIKE, [1], [9], [1, 1, 1]])
@pytest.mark.parametrize("heads,kv_heads,head_dim", [(4, 4, 16), (9, 3, 64), (16, 8, 32)])
@pytest.mark.parametrize("path", ["auto", "padded"])
def test_batched_prefill_equals_per_sequence_loop(lens, heads, kv_heads, head_dim, path):
    q, k, v = qkv(lens, heads, kv_heads, head_dim)
    meta, scale = AttentionMetadata.for_prompts(lens), head_dim**-0.5
    expected = prefill.loop_attention(q, k, v, meta, scale)
    run = prefill.prefill_attention if path == "auto" else prefill.padded_attention
    got = run(q, k, v, meta, scale)
    assert got.shape == q.shape and got.is_contiguous()
    torch.testing.assert_close(got, expected, atol=2e-6, rtol=1e-5)


def test_auto_on_cpu_pads_alike_lengths_and_loops_over_mixed_ones(monkeypatch):
    calls = []
    monkeypatch.setattr(prefill, "padded_attention", lambda *a: calls.append("padded") or a[0])
    monkeypatch.setattr(prefill, "loop_attention", lambda *a: calls.append("loop") or a[0])
    for lens in (ALIKE, MIXED, [7]):
        prefill.prefill_attention(*qkv(lens, 4, 2, 16), AttentionMetadata.for_prompts(lens), 0.25)
    assert calls == ["padded", "loop", "loop"]


def test_half_precision_on_cuda_takes_flash_varlen_and_nothing_else(monkeypatch):
    """One path per case, no silent fallback: where FA2's varlen kernel applies it runs, and its
    failure is the caller's error."""
    monkeypatch.setattr(prefill, "flash_usable", lambda q: True)  # pretend we are on CUDA in bf16
    lens = [3, 4]
    q, k, v = qkv(lens, 4, 2, 16)
    meta = AttentionMetadata.for_prompts(lens)

    def broken(*args):
        raise RuntimeError("FlashAttention was not compiled for this GPU")

    monkeypatch.setattr(prefill, "flash_prefill", broken)
    with pytest.raises(RuntimeError, match="not compiled"):
        prefill.prefill_attention(q, k, v, meta, 0.25)


@pytest.mark.parametrize("lens", [ALIKE, MIXED])
def test_model_prefill_matches_the_loop(tiny_llama, lens, monkeypatch):
    """Whole model (GQA 4/2 heads): hidden states of the batched paths equal the per-sequence
    loop's."""
    model, cfg = tiny_llama.model, tiny_llama.config
    ids = torch.randint(0, cfg.vocab_size, (sum(lens),), generator=torch.Generator().manual_seed(3))
    positions = torch.cat([torch.arange(n) for n in lens])
    out = {}
    paths = {
        "loop": prefill.loop_attention,
        "auto": prefill.dense_prefill,
        "padded": prefill.padded_attention,
    }
    with torch.inference_mode():
        for name, path in paths.items():
            monkeypatch.setattr(prefill, "dense_prefill", path)
            out[name] = model(ids, positions, AttentionMetadata.for_prompts(lens))
    torch.testing.assert_close(out["auto"], out["loop"], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out["padded"], out["loop"], atol=1e-5, rtol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("heads,kv_heads,head_dim", [(16, 8, 128), (32, 8, 128), (9, 3, 64)])
def test_cuda_varlen_matches_the_loop_in_bf16(heads, kv_heads, head_dim):
    """qwen3-0.6b / qwen3-4b / SmolLM2 head shapes: one varlen kernel call == per-sequence SDPA,
    bf16."""
    lens = [1, 32, 7, 100, 33, 32, 2]
    q, k, v = qkv(lens, heads, kv_heads, head_dim, torch.bfloat16, "cuda")
    meta, scale = AttentionMetadata.for_prompts(lens, "cuda"), head_dim**-0.5
    expected = prefill.loop_attention(q, k, v, meta, scale)
    got = prefill.prefill_attention(q, k, v, meta, scale)
    torch.testing.assert_close(got.float(), expected.float(), atol=2e-2, rtol=2e-2)


@pytest.mark.gpu
def test_cuda_engine_prefill_uses_the_varlen_kernel(monkeypatch):
    """On CUDA in bf16 the torch backend takes flash varlen; the model's output stays close to the
    loop's."""
    loaded = load_model(
        "tiny-qwen3", dtype="bf16", device="cuda", seed=2, attention_backend="torch"
    )
    lens = [3, 17, 1, 9]
    ids = torch.randint(0, loaded.config.vocab_size, (sum(lens),), device="cuda")
    positions = torch.cat([torch.arange(n) for n in lens]).cuda()
    calls = []
    flash = prefill.flash_prefill
    monkeypatch.setattr(prefill, "flash_prefill", lambda *a: calls.append(1) or flash(*a))
    out = {}
    with torch.inference_mode():
        for name in ("loop", "auto"):
            if name == "loop":
                monkeypatch.setattr(prefill, "flash_usable", lambda q: False)
                monkeypatch.setattr(prefill, "dense_prefill", prefill.loop_attention)
            else:
                monkeypatch.undo()
                monkeypatch.setattr(
                    prefill, "flash_prefill", lambda *a: calls.append(1) or flash(*a)
                )
            out[name] = loaded.model(
                ids, positions, AttentionMetadata.for_prompts(lens, "cuda")
            ).float()
    assert calls
    # bf16 through two layers: compare relative to the hidden states' scale, not element by element.
    assert (out["auto"] - out["loop"]).norm() <= 2e-2 * out["loop"].norm()
