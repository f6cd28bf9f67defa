"""GGUF (llama.cpp) files -> Hugging Face-style checkpoint directories, converted once, cached.

Parsing and dequantizing a GGUF takes seconds; the cached copy (config.json + fp32
model.safetensors) loads in a fraction of that through the ordinary checkpoint path. The cache key
is the file's name, size and mtime, so an edited or truncated copy never reuses another file's
conversion.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gguf import GGUFReader, dequantize
from safetensors.torch import save_file

from ..core.errors import BubblelabError
from ..core.files import write_atomic

SUPPORTED_ARCHITECTURES = ("llama", "qwen3")
CACHE_FORMAT = 1  # bump when the conversion changes, so stale cache entries are not reused

_TOP_LEVEL = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
_PER_LAYER = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def cache_root() -> Path:
    """BUBBLELAB_CACHE, else $XDG_CACHE_HOME/bubblelab, else ~/.cache/bubblelab."""
    if "BUBBLELAB_CACHE" in os.environ:
        return Path(os.environ["BUBBLELAB_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "bubblelab"


def gguf_cache_dir(path: Path) -> Path:
    stat = path.stat()
    return cache_root() / "gguf" / f"{path.stem}-{stat.st_size}-{stat.st_mtime_ns}-v{CACHE_FORMAT}"


@contextmanager
def building(final: Path) -> Iterator[Path]:
    """A scratch directory that becomes `final` only if the block succeeds: no half-written cache
    entries."""
    final.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}-"))
    try:
        yield scratch
        try:
            scratch.rename(final)
        except OSError:
            if not final.exists():  # else a concurrent process finished first; keep its copy
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        with suppress(OSError):  # a failed conversion (bad file) leaves no empty entry behind
            final.parent.rmdir()


def open_gguf(path: Path) -> GGUFReader:
    try:
        return GGUFReader(path)
    except Exception as e:  # the reader raises bare ValueErrors (bad magic, short tensor data, ...)
        detail = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise BubblelabError(
            f"{path} is not a valid GGUF file (corrupt or truncated?): {detail}"
        ) from None


def gguf_checkpoint(path: Path) -> Path:
    """The cached Hugging Face-style checkpoint directory of a GGUF, converted on first use."""
    out = gguf_cache_dir(path) / "model"
    if not (out / "config.json").exists():
        with building(out) as scratch:
            convert_gguf(open_gguf(path), scratch)
    return out


def convert_gguf(reader: GGUFReader, out: Path) -> None:
    """Writes config.json and fp32 model.safetensors (HF names) of a llama or qwen3 GGUF."""
    arch = _field(reader, "general.architecture")
    if arch not in SUPPORTED_ARCHITECTURES:
        raise BubblelabError(
            f"unsupported GGUF architecture {arch!r}; "
            f"supported: {', '.join(SUPPORTED_ARCHITECTURES)}"
        )
    config = _hf_config(reader, arch)
    tensors = {}
    for t in reader.tensors:
        weight = torch.from_numpy(np.array(dequantize(t.data, t.tensor_type), dtype=np.float32))
        name = _hf_name(t.name)
        # llama.cpp interleaves the two rotary halves of each llama q/k head; HF's (neox-style)
        # RoPE wants them as halves.
        if arch == "llama" and name.endswith(("q_proj.weight", "k_proj.weight")):
            heads = (
                config["num_attention_heads"] if "q_proj" in name else config["num_key_value_heads"]
            )
            weight = (
                weight.reshape(heads, -1, 2, *weight.shape[1:])
                .transpose(1, 2)
                .reshape(weight.shape)
            )
        tensors[name] = weight.contiguous()
    write_atomic(
        out / "model.safetensors", lambda path: save_file(tensors, path, metadata={"format": "pt"})
    )
    write_atomic(out / "config.json", json.dumps(config, indent=2))


def _field(reader: GGUFReader, key: str, default: Any = None) -> Any:
    field = reader.fields.get(key)
    return default if field is None else field.contents()


def _hf_name(gguf_name: str) -> str:
    stem, _, kind = gguf_name.rpartition(".")
    if stem.startswith("blk."):
        _, layer, part = stem.split(".", 2)
        hf = f"model.layers.{layer}.{_PER_LAYER[part]}" if part in _PER_LAYER else None
    else:
        hf = _TOP_LEVEL.get(stem)
    if hf is None:
        raise BubblelabError(
            f"GGUF tensor {gguf_name!r} is not part of a llama / qwen3 model (unsupported variant)"
        )
    return f"{hf}.{kind}"


def _hf_config(reader: GGUFReader, arch: str) -> dict:
    tensors = {t.name: t for t in reader.tensors}
    if "rope_freqs.weight" in tensors:
        raise BubblelabError(
            "GGUF stores per-frequency rope factors (llama3 rope scaling), which is not supported"
        )

    # Architecture-prefixed metadata, e.g. llama.block_count.
    def f(key: str, default: Any = None) -> Any:
        return _field(reader, f"{arch}.{key}", default)

    heads, hidden = f("attention.head_count"), f("embedding_length")
    config = {
        "model_type": arch,
        "vocab_size": f("vocab_size") or int(tensors["token_embd.weight"].shape[1]),
        "hidden_size": hidden,
        "intermediate_size": f("feed_forward_length"),
        "num_hidden_layers": f("block_count"),
        "num_attention_heads": heads,
        "num_key_value_heads": f("attention.head_count_kv", heads),
        "head_dim": f("attention.key_length", hidden // heads),
        "rope_theta": f("rope.freq_base", 10000.0),
        "rms_norm_eps": f("attention.layer_norm_rms_epsilon", 1e-6),
        "max_position_embeddings": f("context_length", 4096),
        "tie_word_embeddings": "output.weight" not in tensors,
        "bos_token_id": _field(reader, "tokenizer.ggml.bos_token_id"),
        "eos_token_id": _field(reader, "tokenizer.ggml.eos_token_id"),
        "torch_dtype": "float32",
    }
    scaling = f("rope.scaling.type", "none")
    if scaling == "linear":
        config["rope_scaling"] = {"rope_type": "linear", "factor": f("rope.scaling.factor")}
    elif scaling != "none":
        raise BubblelabError(
            f"unsupported rope scaling {scaling!r} in GGUF; supported: none, linear"
        )
    return config
