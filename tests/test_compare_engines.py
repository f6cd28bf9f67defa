"""engine.export (our weights in transformers' model) and a CPU dry run of benchmarks/compare_engines.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from bubblelab.engine.attention import AttentionMetadata
from bubblelab.engine.export import hf_causal_lm, to_hf
from bubblelab.engine.loader import hf_model_config, load_model
from bubblelab.engine.reference import greedy_reference

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import compare_engines  # noqa: E402


@pytest.mark.parametrize("preset", ["tiny-qwen3", "tiny-llama"])
@torch.inference_mode()
def test_exported_model_matches_ours(preset):
    loaded = load_model(preset, seed=3, attention_backend="torch")
    raw, _ = to_hf(loaded)
    assert hf_model_config(raw) == loaded.config  # config.json round trip
    hf = hf_causal_lm(loaded)
    assert type(hf).__name__ == raw["architectures"][0]
    prompts = torch.randint(
        0, loaded.config.vocab_size, (3, 13), generator=torch.Generator().manual_seed(0)
    )
    ref = hf(prompts).logits
    ours = torch.stack(
        [
            loaded.model.compute_logits(
                loaded.model(p, torch.arange(len(p)), AttentionMetadata.for_prompts([len(p)]))
            )
            for p in prompts
        ]
    )
    assert ref.abs().max() > 0.5  # logits of order 1, so the absolute bound is a tight one
    assert (ours - ref).abs().max() < 1e-4


@torch.inference_mode()
def test_to_hf_inverts_load_weights(tmp_path):
    """HF checkpoint -> load_weights (fuses) -> to_hf (splits) gives back every tensor, bit for bit."""
    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=300,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        tie_word_embeddings=False,
        max_position_embeddings=256,
        rope_parameters={"rope_type": "default", "rope_theta": 1e6},
    )
    hf = Qwen3ForCausalLM(config).eval()
    for p in hf.parameters():  # norms included, so a swapped or dropped tensor cannot pass
        p.add_(torch.randn_like(p) * 0.05)
    hf.save_pretrained(tmp_path)
    _, state = to_hf(load_model(str(tmp_path), attention_backend="torch"))
    expected = hf.state_dict()
    assert state.keys() == expected.keys()
    assert all(torch.equal(state[k], expected[k]) for k in expected)


def test_hf_generate_is_greedy_and_exact_length(tiny_qwen3):
    """The harness's generate settings decode exactly N tokens per row, the same tokens as our greedy oracle."""
    model = hf_causal_lm(tiny_qwen3)
    prompts = torch.randint(100, 400, (2, 7), generator=torch.Generator().manual_seed(1))
    run = compare_engines.hf_generate(model, tiny_qwen3.config, prompts, 6, compiled=False)
    assert run.ids.shape == (2, 7 + 6) and run.seconds > 0
    assert len(run.marks_ms) >= 6 and all(
        m > 0 for m in run.marks_ms
    )  # prefill, then one per decode step
    for prompt, row in zip(prompts, run.ids):
        assert row[7:].tolist() == greedy_reference(tiny_qwen3, prompt.tolist(), 6)


def test_cpu_dry_run_writes_every_output(tmp_path):
    result = compare_engines.main(
        [
            "--device",
            "cpu",
            "--presets",
            "tiny-qwen3",
            "--streams",
            "1,2",
            "--repeats",
            "1",
            "--L",
            "8",
            "--out",
            str(tmp_path),
        ]
    )
    summary = {(r["engine"], r["streams"]): r for r in result["summary"]}
    assert set(summary) == {
        (e, s) for e in ("bubblelab-d1", "bubblelab-d2", "hf-static") for s in (1, 2)
    }
    for (engine, streams), row in summary.items():
        assert row["decode_tokens_per_s"] > 0 and row["step_ms"] > 0 and row["wall_s"] > 0
        if engine.startswith("bubblelab"):
            assert 0 < row["gpu_busy"] <= 1 and row["forward_ms"] <= row["step_ms"]
    hf_runs = [r for r in result["runs"] if r["engine"] == "hf-static"]
    assert all(
        r["generated_tokens"] == 8 * r["streams"] for r in hf_runs
    )  # min_new_tokens = max_new_tokens
    not_run = {n["engine"]: n["reason"] for n in result["not_run"]}
    assert not_run["nano-vllm"].startswith("not run:")
    assert not_run["hf-static-compiled"].startswith("not run:")

    assert (
        json.loads((tmp_path / "compare_engines.json").read_text())["summary"] == result["summary"]
    )
    markdown = (tmp_path / "compare_engines.md").read_text()
    assert markdown.count("| tiny-qwen3 |") == 6 + 1  # six table rows and the floor row
    assert "nano-vllm: not run:" in markdown
    assert (tmp_path / "compare_engines.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cpu_dry_run_backends_and_unavailable_backend(tmp_path):
    """--bubblelab-backends: one pair of rows per backend that runs; one that cannot (flash-attn on CPU) is a
    not_run line with its reason, and the run goes on."""
    result = compare_engines.main(
        [
            "--device",
            "cpu",
            "--presets",
            "tiny-qwen3",
            "--streams",
            "1",
            "--repeats",
            "1",
            "--L",
            "8",
            "--bubblelab-backends",
            "torch,flash-attn",
            "--skip-hf-compile",
            "--out",
            str(tmp_path),
        ]
    )
    engines = {r["engine"]: r for r in result["summary"]}
    assert set(engines) == {"bubblelab-d1", "bubblelab-d2", "hf-static"}
    assert engines["bubblelab-d1"]["attention"] == "torch"
    not_run = {(n["engine"], n["preset"]): n["reason"] for n in result["not_run"]}
    reason = not_run[("bubblelab[flash-attn]", "tiny-qwen3")]
    assert "flash-attn" in reason and "\n" not in reason
    markdown = (tmp_path / "compare_engines.md").read_text()
    assert "| attention |" in markdown and "bubblelab[flash-attn] (tiny-qwen3):" in markdown
    assert (
        "bubblelab-d1_forward_over_floor" in result["floor"]["tiny-qwen3"]
        or result["floor"]["tiny-qwen3"]["floor_ms"] is None
    )


def test_extra_backend_rows_are_suffixed(tmp_path):
    result = compare_engines.main(
        [
            "--device",
            "cpu",
            "--presets",
            "tiny-qwen3",
            "--streams",
            "1",
            "--repeats",
            "1",
            "--L",
            "6",
            "--bubblelab-backends",
            "triton,torch",
            "--skip-hf-compile",
            "--out",
            str(tmp_path),
        ]
    )
    engines = {r["engine"] for r in result["summary"]}
    assert {"bubblelab-d1[torch]", "bubblelab-d2[torch]"} <= engines
    assert not any(
        e in engines for e in ("bubblelab-d1", "bubblelab-d2")
    )  # triton needs CUDA: not_run
    assert any(n["engine"] == "bubblelab[triton]" for n in result["not_run"])


FAKE_NANOVLLM = """
import os
from dataclasses import dataclass


@dataclass
class SamplingParams:
    temperature: float = 1.0
    max_tokens: int = 64
    ignore_eos: bool = False


class LLM:
    def __init__(self, model, tokenizer=None, **kw):
        assert os.path.isfile(os.path.join(model, "config.json"))
        assert os.path.isfile(os.path.join(model, "model.safetensors"))
        if os.environ.get("FAKE_NANO_FAIL"):
            raise RuntimeError("fake failure\\nsecond line")

    def generate(self, prompts, params, use_tqdm=True):
        return [{"text": "", "token_ids": [0] * params.max_tokens} for _ in prompts]

    def exit(self):
        pass
"""


@pytest.mark.parametrize("fail", [False, True])
def test_nano_vllm_child_process_plumbing(tmp_path, monkeypatch, tiny_qwen3, fail):
    """bench_nano_vllm against a stand-in nanovllm package: checkpoint, child process, rows or a one-line reason."""
    fake = tmp_path / "fake"
    (fake / "nanovllm" / "models").mkdir(parents=True)
    (fake / "nanovllm" / "__init__.py").write_text(FAKE_NANOVLLM)
    (fake / "nanovllm" / "models" / "__init__.py").write_text("")
    (fake / "nanovllm" / "models" / "qwen3.py").write_text(
        "def get_rope(*a, rope_scaling=None, **k):\n    pass\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(fake))
    if fail:
        monkeypatch.setenv("FAKE_NANO_FAIL", "1")
    sweep = compare_engines.Sweep(
        presets=["tiny-qwen3"],
        streams=[1, 2],
        repeats=1,
        requests_per_stream=2,
        hf_repeats=1,
        L=5,
        prompt_len=4,
        device="cpu",
        hf_compile=False,
    )
    result = {"runs": [], "not_run": []}
    compare_engines.bench_nano_vllm(
        tiny_qwen3, "tiny-qwen3", sweep, compare_engines.Clock(), result, tmp_path / "w"
    )
    assert not (tmp_path / "w" / "ckpt-tiny-qwen3").exists()  # the checkpoint is removed afterwards
    if fail:
        assert result["runs"] == []
        assert result["not_run"] == [
            {"engine": "nano-vllm", "preset": "tiny-qwen3", "reason": "RuntimeError: fake failure"}
        ]
        return
    assert result["not_run"] == []
    assert [(r["engine"], r["streams"], r["generated_tokens"]) for r in result["runs"]] == [
        ("nano-vllm", 1, 5),
        ("nano-vllm", 2, 10),
    ]
    assert all(r["prefill_ms"] > 0 and r["e2e_tokens_per_s"] > 0 for r in result["runs"])


# -- the flash-attn backend's pure-Python parts (no flash-attn import) ---------------------------------------
def test_flash_backend_picks_fa4_then_fa2(monkeypatch):
    from bubblelab.engine.attention import flash_backend as fb
    from bubblelab.errors import BubblelabError

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


def test_flash_attn_shim_is_never_taken_for_fa2():
    """benchmarks/flash_attn_shim is a `flash_attn` with the FA2 API: the engine must recognise it."""
    import importlib.util

    from bubblelab.engine.attention import flash_backend as fb

    path = (
        Path(__file__).resolve().parents[1]
        / "benchmarks"
        / "flash_attn_shim"
        / "flash_attn"
        / "__init__.py"
    )
    spec = importlib.util.spec_from_file_location(
        "bubblelab_test_shim", path, submodule_search_locations=[]
    )
    shim = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(shim)
    assert fb.is_shim(shim) and hasattr(shim, "flash_attn_with_kvcache")
    assert not fb.is_shim(torch)
