"""to_hf(): our model as a Hugging Face config.json dict and state dict, the inverse of
TransformerLM.load_weights.

The fused projections are split back into HF's names (qkv_proj -> q/k/v_proj,
gate_up_proj -> gate/up_proj), so transformers' own Llama / Qwen3 classes can run the very same
weights (benchmarks/compare_engines.py).
"""

from __future__ import annotations

import torch
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedModel

from ..core.errors import BubblelabError
from .config import ModelConfig
from .loader import LoadedModel

HF_CLASSES = {"llama": "LlamaForCausalLM", "qwen3": "Qwen3ForCausalLM"}


def hf_config_dict(cfg: ModelConfig, dtype: torch.dtype | None = None) -> dict:
    """config.json contents that engine.loader.hf_model_config reads back to `cfg`."""
    eos = list(cfg.eos_token_ids)
    rope = {"rope_type": "default"} if cfg.rope_scaling is None else dict(cfg.rope_scaling)
    raw = {
        "architectures": [HF_CLASSES[cfg.architecture]],
        "model_type": cfg.architecture,
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads,
        "num_key_value_heads": cfg.num_kv_heads,
        "head_dim": cfg.head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": cfg.rms_norm_eps,
        "rope_parameters": {**rope, "rope_theta": cfg.rope_theta},
        "tie_word_embeddings": cfg.tie_word_embeddings,
        "max_position_embeddings": cfg.max_position_embeddings,
        "attention_bias": False,
        "mlp_bias": False,
        "bos_token_id": cfg.bos_token_id,
        "eos_token_id": eos[0] if len(eos) == 1 else (eos or None),
    }
    if dtype is not None:
        raw["dtype"] = str(dtype).removeprefix("torch.")
    return raw


def to_hf(loaded: LoadedModel) -> tuple[dict, dict[str, torch.Tensor]]:
    """(config.json dict, state dict in HF names); tensors are views of the model's, no copy."""
    model, cfg = loaded.model, loaded.config
    q, kv, inter = (
        cfg.num_heads * cfg.head_dim,
        cfg.num_kv_heads * cfg.head_dim,
        cfg.intermediate_size,
    )
    # fused name -> the HF shards it stacks, in row order (load_weights' table, read the other way)
    fused = {
        "qkv_proj": {"q_proj": q, "k_proj": kv, "v_proj": kv},
        "gate_up_proj": {"gate_proj": inter, "up_proj": inter},
    }
    state: dict[str, torch.Tensor] = {}
    # Parameters only: the RoPE table is computed, not loaded.
    for name, param in model.named_parameters():
        hf_name = name if name == "lm_head.weight" else f"model.{name}"
        fused_name = next((f for f in fused if f".{f}." in name), None)
        if fused_name is None:
            state[hf_name] = param
            continue
        shards = fused[fused_name]
        for shard, part in zip(shards, param.split(list(shards.values())), strict=True):
            state[hf_name.replace(fused_name, shard)] = part
    return hf_config_dict(cfg, next(model.parameters()).dtype), state


def hf_causal_lm(loaded: LoadedModel) -> PreTrainedModel:
    """transformers' own LlamaForCausalLM / Qwen3ForCausalLM holding a copy of `loaded`'s weights,
    same device and dtype, in eval mode."""
    raw, state = to_hf(loaded)
    weight = next(loaded.model.parameters())
    config = AutoConfig.for_model(**raw)
    # Allocate (and throw-away initialise) on the target device directly.
    with torch.device(weight.device):
        hf = AutoModelForCausalLM.from_config(config, dtype=weight.dtype)
    missing, unexpected = hf.load_state_dict(state, strict=False)
    tied = {"lm_head.weight"} if loaded.config.tie_word_embeddings else set()
    if unexpected or set(missing) - tied:
        raise BubblelabError(
            f"export does not match transformers' {raw['architectures'][0]}: "
            f"missing {sorted(set(missing) - tied)}, unexpected {sorted(unexpected)}"
        )
    if tied:  # share the matrix whether or not this transformers version tied it at construction
        hf.get_output_embeddings().weight = hf.get_input_embeddings().weight
    return hf.eval().requires_grad_(False)
