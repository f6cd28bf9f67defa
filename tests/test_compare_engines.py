"""engine.export (our weights in transformers' model) and a CPU dry run of benchmarks/compare_engines.py."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from engine.attention import AttentionMetadata
from engine.export import hf_causal_lm, to_hf
from engine.loader import hf_model_config, load_model
from engine.reference import greedy_reference

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import compare_engines  # noqa: E402


@pytest.mark.parametrize("preset", ["tiny-qwen3", "tiny-llama"])
@torch.inference_mode()
def test_exported_model_matches_ours(preset):
    loaded = load_model(preset, seed=3, attention_backend="torch")
    raw, _ = to_hf(loaded)
    assert hf_model_config(raw) == loaded.config   # config.json round trip
    hf = hf_causal_lm(loaded)
    assert type(hf).__name__ == raw["architectures"][0]
    prompts = torch.randint(0, loaded.config.vocab_size, (3, 13), generator=torch.Generator().manual_seed(0))
    ref = hf(prompts).logits
    ours = torch.stack([loaded.model.compute_logits(loaded.model(p, torch.arange(len(p)),
                                                                 AttentionMetadata.for_prompts([len(p)])))
                        for p in prompts])
    assert ref.abs().max() > 0.5   # logits of order 1, so the absolute bound is a tight one
    assert (ours - ref).abs().max() < 1e-4


@torch.inference_mode()
def test_to_hf_inverts_load_weights(tmp_path):
    """HF checkpoint -> load_weights (fuses) -> to_hf (splits) gives back every tensor, bit for bit."""
    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=32, tie_word_embeddings=False,
                         max_position_embeddings=256, rope_parameters={"rope_type": "default", "rope_theta": 1e6})
    hf = Qwen3ForCausalLM(config).eval()
    for p in hf.parameters():   # norms included, so a swapped or dropped tensor cannot pass
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
    assert len(run.marks_ms) >= 6 and all(m > 0 for m in run.marks_ms)   # prefill, then one per decode step
    for prompt, row in zip(prompts, run.ids):
        assert row[7:].tolist() == greedy_reference(tiny_qwen3, prompt.tolist(), 6)


def test_cpu_dry_run_writes_every_output(tmp_path):
    result = compare_engines.main(["--device", "cpu", "--presets", "tiny-qwen3", "--streams", "1,2",
                                   "--repeats", "1", "--L", "8", "--out", str(tmp_path)])
    summary = {(r["engine"], r["streams"]): r for r in result["summary"]}
    assert set(summary) == {(e, s) for e in ("bubblelab-d1", "bubblelab-d2", "hf-static") for s in (1, 2)}
    for (engine, streams), row in summary.items():
        assert row["decode_tokens_per_s"] > 0 and row["step_ms"] > 0 and row["wall_s"] > 0
        if engine.startswith("bubblelab"):
            assert 0 < row["gpu_busy"] <= 1 and row["forward_ms"] <= row["step_ms"]
    hf_runs = [r for r in result["runs"] if r["engine"] == "hf-static"]
    assert all(r["generated_tokens"] == 8 * r["streams"] for r in hf_runs)   # min_new_tokens = max_new_tokens
    not_run = {n["engine"]: n["reason"] for n in result["not_run"]}
    assert not_run["nano-vllm"].startswith("not run:")
    assert not_run["hf-static-compiled"].startswith("not run:")

    assert json.loads((tmp_path / "compare_engines.json").read_text())["summary"] == result["summary"]
    markdown = (tmp_path / "compare_engines.md").read_text()
    assert markdown.count("| tiny-qwen3 |") == 6 + 1   # six table rows and the floor row
    assert "nano-vllm: not run:" in markdown
    assert (tmp_path / "compare_engines.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
