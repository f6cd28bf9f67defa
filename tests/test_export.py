"""engine.export: our weights in transformers' own model classes, and back."""

from __future__ import annotations

import pytest
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from bubblelab.engine.attention import AttentionMetadata
from bubblelab.engine.export import hf_causal_lm, to_hf
from bubblelab.engine.loader import hf_model_config, load_model


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
    """HF checkpoint -> load_weights (fuses) -> to_hf (splits) gives back every tensor, bit for
    bit."""
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
