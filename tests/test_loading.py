"""load_model() sources (embedded GGUF, HF directory, presets), the greedy oracle, and one-line
input errors."""

from __future__ import annotations

import json
import time

import gguf
import numpy as np
import pytest
import torch
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM

from bubblelab.core.errors import BubblelabError
from bubblelab.engine.attention import AttentionMetadata
from bubblelab.engine.gguf_loader import gguf_cache_dir
from bubblelab.engine.loader import embedded_model_path, load_model
from bubblelab.engine.reference import greedy_reference
from bubblelab.engine.tokenizer import chat_prompt_ids


@pytest.fixture(scope="module")
def embedded():
    return load_model()


def test_embedded_model_answers_paris(embedded):
    assert embedded.source == "gguf" and embedded.config.architecture == "llama"
    prompt = chat_prompt_ids(embedded.tokenizer, "What is the capital of France?")
    answer = greedy_reference(
        embedded, prompt, max_new_tokens=24, stop_token_ids=embedded.config.eos_token_ids
    )
    assert "Paris" in embedded.tokenizer.decode(answer)


def test_gguf_conversion_and_tokenizer_are_cached(embedded):
    cache = gguf_cache_dir(embedded_model_path())
    assert (cache / "model" / "model.safetensors").is_file() and (
        cache / "tokenizer" / "tokenizer.json"
    ).is_file()
    start = time.perf_counter()
    load_model()
    assert time.perf_counter() - start < 10.0  # warm load; measured ~1.4 s on the 2-core dev box


def test_presets_are_seeded_and_non_degenerate():
    a, b, c = (load_model("tiny-qwen3", seed=s) for s in (0, 0, 1))
    assert a.source == "preset" and a.tokenizer is None
    sd_a, sd_b, sd_c = (m.model.state_dict() for m in (a, b, c))
    assert all(torch.equal(sd_a[k], sd_b[k]) for k in sd_a)
    assert not torch.equal(sd_a["embed_tokens.weight"], sd_c["embed_tokens.weight"])
    with torch.inference_mode():
        hidden = a.model(torch.arange(8), torch.arange(8), AttentionMetadata.for_prompts([8]))
        logits = a.model.compute_logits(hidden)
    assert logits.std() > 0.1 and logits.argmax(-1).unique().numel() > 1


def test_preset_in_bf16():
    loaded = load_model("tiny-llama", dtype="bf16")
    assert all(p.dtype == torch.bfloat16 for p in loaded.model.parameters())
    assert loaded.model.rotary_emb.cos_sin_cache.dtype == torch.float32


def test_hf_directory_with_v4_rope_spelling_and_tokenizer(embedded, tmp_path):
    LlamaForCausalLM(
        LlamaConfig(
            vocab_size=300,
            hidden_size=64,
            intermediate_size=96,
            num_hidden_layers=1,
            num_attention_heads=4,
            num_key_value_heads=2,
        )
    ).save_pretrained(tmp_path)
    raw = json.loads((tmp_path / "config.json").read_text())
    raw.pop("rope_parameters")  # transformers 4.x wrote rope_theta + rope_scaling instead
    raw |= {"rope_theta": 5000.0, "rope_scaling": {"type": "linear", "factor": 2.0}}
    (tmp_path / "config.json").write_text(json.dumps(raw))
    embedded.tokenizer.save_pretrained(tmp_path)
    loaded = load_model(str(tmp_path))
    assert loaded.source == "hf" and loaded.tokenizer is not None
    assert loaded.config.rope_theta == 5000.0 and loaded.config.rope_scaling == {
        "type": "linear",
        "factor": 2.0,
    }


def _gguf_with_architecture(path, arch: str) -> None:
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _assert_one_line_error(match: str, spec, **kw) -> None:
    with pytest.raises(BubblelabError, match=match) as info:
        load_model(spec, **kw)
    assert "\n" not in str(info.value)


def test_missing_path():
    _assert_one_line_error("does not exist", "/no/such/dir/model.gguf")


def test_unknown_preset_names_both_possibilities():
    _assert_one_line_error("neither an existing path nor a known preset.*tiny-llama", "llama-9000")


def test_corrupt_gguf(tmp_path):
    bad = tmp_path / "random.gguf"
    bad.write_bytes(np.random.default_rng(0).bytes(4096))
    _assert_one_line_error("not a valid GGUF file", str(bad))


def test_truncated_gguf(tmp_path):
    real = embedded_model_path()
    cut = tmp_path / "truncated.gguf"
    with real.open("rb") as f:
        cut.write_bytes(f.read(real.stat().st_size // 2))
    _assert_one_line_error("not a valid GGUF file", str(cut))


def test_unsupported_architecture_in_config_json(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    save_file({"wte.weight": torch.zeros(4, 8)}, tmp_path / "model.safetensors")
    _assert_one_line_error("unsupported architecture 'gpt2'", str(tmp_path))


def test_unsupported_architecture_in_gguf(tmp_path):
    path = tmp_path / "gpt2.gguf"
    _gguf_with_architecture(path, "gpt2")
    _assert_one_line_error("unsupported GGUF architecture 'gpt2'", str(path))


def test_wrong_dtype_name():
    _assert_one_line_error(
        "dtype must be one of fp32, bf16, fp16, got 'fp33'", "tiny-llama", dtype="fp33"
    )
