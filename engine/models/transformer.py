"""Decoder-only Llama / Qwen3 over flat token batches (Qwen3 = Llama + per-head q/k RMSNorm).

Projections are fused vLLM-style (qkv_proj, gate_up_proj); load_weights maps Hugging Face names onto
them. Every op in forward() is shape-static and sync-free, so a decode step can be captured in a
CUDA graph. The residual stream is vLLM's: each RMSNorm also does the pending residual add; with
set_compile(True) on CUDA a layer is its four GEMMs, the attention kernels and three Triton
kernels for the elementwise chains (add+RMSNorm twice, q/k norm+RoPE+KV store, SiLU*mul:
models/triton_fused.py), all of them PDL-aware (engine/pdl.py).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from typing import cast

import torch
from torch import nn

from ...core.errors import BubblelabError
from ..attention import AttentionBackend, store_kv_cache
from ..attention.metadata import AttentionMetadata
from ..config import ModelConfig
from ..parallel.comm import SINGLE, TensorParallel
from ..parallel.layers import (
    MergedColumnParallelLinear,
    ParallelLMHead,
    ParallelModule,
    QKVParallelLinear,
    RowParallelLinear,
    VocabParallelEmbedding,
    vocab_logits,
)
from .layers import Fusable, RMSNorm, RotaryEmbedding, SiluAndMul, fused, norm_linear


class Attention(Fusable):
    def __init__(self, cfg: ModelConfig, backend: AttentionBackend, tp: TensorParallel = SINGLE):
        super().__init__()
        # This rank's heads: all of them at tensor parallel 1.
        self.num_heads = tp.split(cfg.num_heads, "attention heads")
        self.num_kv_heads = tp.split(cfg.num_kv_heads, "KV heads")
        self.head_dim = cfg.head_dim
        self.q_size, self.kv_size = self.num_heads * cfg.head_dim, self.num_kv_heads * cfg.head_dim
        self.scale = cfg.head_dim**-0.5
        self.qkv_proj = QKVParallelLinear(
            cfg.hidden_size, cfg.head_dim, cfg.num_heads, cfg.num_kv_heads, tp
        )
        self.o_proj = RowParallelLinear(cfg.num_heads * cfg.head_dim, cfg.hidden_size, tp)
        self.qk_norm = cfg.qk_norm
        if cfg.qk_norm:
            self.q_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps)
            self.k_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps)
        self.backend = backend
        # q/k norm, RoPE and the cache store as one Triton kernel (set_compile turns it on on CUDA)
        self.triton_qkv = False
        # Paged K/V caches, each [num_blocks, block_size, kv_heads, head_dim], bound later.
        self.k_cache: torch.Tensor | None = None
        self.v_cache: torch.Tensor | None = None

    def forward(
        self,
        positions: torch.Tensor,
        qkv: torch.Tensor,
        meta: AttentionMetadata,
        rotary: RotaryEmbedding,
    ) -> torch.Tensor:
        """qkv: qkv_proj's output (DecoderLayer runs the projection with the norm before it)."""
        if self.triton_qkv:
            from .triton_fused import qk_norm_rope_store  # Triton: imported only where it runs

            q, k, v = qk_norm_rope_store(
                qkv,
                positions,
                rotary.cos_sin_cache,
                self.num_heads,
                self.num_kv_heads,
                self.head_dim,
                self.q_norm.weight if self.qk_norm else None,
                self.k_norm.weight if self.qk_norm else None,
                self.q_norm.eps if self.qk_norm else 0.0,
                self.k_cache,
                self.v_cache,
                meta.slot_mapping,
            )
        else:
            q, k, v = self.qkv_to_cache(positions, qkv, meta.slot_mapping, rotary)
        o = self.backend.forward(q, k, v, self.k_cache, self.v_cache, meta, self.scale)
        return self.o_proj(o.flatten(1))

    @fused
    def qkv_to_cache(
        self,
        positions: torch.Tensor,
        qkv: torch.Tensor,
        slot_mapping: torch.Tensor | None,
        rotary: RotaryEmbedding,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """qkv [N, q+2kv] -> q, k, v [N, heads, head_dim] with Qwen3's q/k RMSNorm and RoPE applied,
        k and v also written to the paged cache (slot_mapping None: no cache, as reference runs)."""
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = q.view(-1, self.num_heads, self.head_dim)
        k = k.view(-1, self.num_kv_heads, self.head_dim)
        v = v.view(-1, self.num_kv_heads, self.head_dim)
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = rotary(positions, q, k)
        if self.k_cache is not None and self.v_cache is not None and slot_mapping is not None:
            store_kv_cache(k, v, self.k_cache, self.v_cache, slot_mapping)
        return q, k, v


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig, tp: TensorParallel = SINGLE):
        super().__init__()
        inter = cfg.intermediate_size
        self.gate_up_proj = MergedColumnParallelLinear(cfg.hidden_size, [inter, inter], tp)
        self.down_proj = RowParallelLinear(inter, cfg.hidden_size, tp)
        self.act = SiluAndMul()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act(self.gate_up_proj(x)))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, backend: AttentionBackend, tp: TensorParallel = SINGLE):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg, backend, tp)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg, tp)

    def forward(
        self,
        positions: torch.Tensor,
        x: torch.Tensor,
        residual: torch.Tensor | None,
        meta: AttentionMetadata,
        rotary: RotaryEmbedding,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(mlp output, residual stream); their sum, the layer's output, is added by the next
        norm."""
        attn, mlp = self.self_attn, self.mlp
        qkv, residual = norm_linear(self.input_layernorm, attn.qkv_proj.weight, x, residual)
        x = attn(positions, qkv, meta, rotary)
        h, residual = norm_linear(
            self.post_attention_layernorm, mlp.gate_up_proj.weight, x, residual, mlp.act
        )
        return mlp.down_proj(h), residual


def _triton_usable() -> bool:
    """Inductor's CUDA kernels are Triton, and Triton builds its launcher with a C compiler on
    first use."""
    from torch.utils._triton import has_triton

    return has_triton() and any(
        shutil.which(cc) for cc in (os.environ.get("CC"), "gcc", "clang") if cc
    )


class TransformerLM(nn.Module):
    def __init__(
        self, cfg: ModelConfig, attn_backend: AttentionBackend, tp: TensorParallel = SINGLE
    ):
        super().__init__()
        self.config = cfg
        self.tp = tp  # this rank's shard of every split layer (the whole model at size 1)
        self.attn_backend = attn_backend
        self.embed_tokens = VocabParallelEmbedding(cfg.vocab_size, cfg.hidden_size, tp)
        self.rotary_emb = RotaryEmbedding(
            cfg.head_dim, cfg.max_position_embeddings, cfg.rope_theta, cfg.rope_scaling
        )
        self.layers = nn.ModuleList(
            DecoderLayer(cfg, attn_backend, tp) for _ in range(cfg.num_layers)
        )
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        # Tied models read the embedding matrix in compute_logits: no shared Parameter to keep tied.
        self.lm_head = (
            None if cfg.tie_word_embeddings else ParallelLMHead(cfg.vocab_size, cfg.hidden_size, tp)
        )

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata
    ) -> torch.Tensor:
        """input_ids, positions: [N], flat over the step's sequences. Returns the final hidden
        states [N, hidden]."""
        first = cast(DecoderLayer, self.layers[0])  # nn.ModuleList items are typed as Module
        meta = self.attn_backend.prepare(
            meta, first.self_attn.k_cache, self.embed_tokens.weight.dtype
        )
        x, residual = self.embed_tokens(input_ids), None
        for layer in self.layers:
            x, residual = layer(positions, x, residual, meta, self.rotary_emb)
        return self.norm(x, residual)[0]

    def set_compile(self, enabled: bool | None) -> None:
        """Runs the fused ops (add+RMSNorm, q/k norm+RoPE+KV store, SiLU*mul) compiled or eagerly.

        None: compiled on CUDA when Triton can build kernels, eager on CPU (Inductor's C++ build is
        slow and CPU steps are not launch-bound). Compilation happens lazily at the first call of
        each op (the engine's warm-up before CUDA-graph capture); Inductor's on-disk cache makes
        later processes start fast.
        """
        cuda = self.embed_tokens.weight.is_cuda
        if enabled is None:
            enabled = cuda and _triton_usable()
        elif enabled and cuda and not _triton_usable():
            raise BubblelabError(
                "compile on CUDA needs Triton and a C compiler (gcc, clang or $CC); "
                "use --no-compile"
            )
        triton = bool(enabled and cuda and os.environ.get("BUBBLELAB_TRITON_QKV", "1") != "0")
        for module in self.modules():
            if isinstance(module, Fusable):
                module.compiled = enabled
            # BUBBLELAB_TRITON_QKV=0 keeps Inductor's kernels for these chains (A/B measurements).
            if isinstance(module, Attention):
                module.triton_qkv = triton
            if isinstance(module, (SiluAndMul, RMSNorm)):
                module.triton = triton

    @property
    def compile_enabled(self) -> bool:
        return self.norm.compiled

    def compute_logits(self, hidden: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """Full-vocabulary logits on every rank (vocab_logits: one all-gather above size 1), into
        `out` when given."""
        weight = self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        return vocab_logits(hidden, weight, self.config.vocab_size, self.tp, out)

    def bind_kv_cache(self, k_caches: list[torch.Tensor], v_caches: list[torch.Tensor]) -> None:
        """Attach one paged cache per layer, each [num_blocks, block_size, kv_heads, head_dim]."""
        if len(k_caches) != len(self.layers) or len(v_caches) != len(self.layers):
            raise ValueError(
                f"need {len(self.layers)} K and V caches, got {len(k_caches)} and {len(v_caches)}"
            )
        for layer, k_cache, v_cache in zip(self.layers, k_caches, v_caches, strict=True):
            attn = cast(DecoderLayer, layer).self_attn
            attn.k_cache, attn.v_cache = k_cache, v_cache

    @torch.no_grad()
    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copies Hugging Face-named tensors in, stacking q/k/v and gate/up into the fused
        projections."""
        cfg = self.config
        q, kv, inter = (
            cfg.num_heads * cfg.head_dim,
            cfg.num_kv_heads * cfg.head_dim,
            cfg.intermediate_size,
        )
        # HF shard name -> (fused name, row offset, rows)
        shards = {
            "q_proj": ("qkv_proj", 0, q),
            "k_proj": ("qkv_proj", q, kv),
            "v_proj": ("qkv_proj", q + kv, kv),
            "gate_proj": ("gate_up_proj", 0, inter),
            "up_proj": ("gate_up_proj", inter, inter),
        }
        params = dict(self.named_parameters())
        loaded: set[tuple[str, int]] = set()  # (parameter, row offset) pairs written
        for hf_name, tensor in weights:
            name = hf_name.removeprefix("model.")
            if name.endswith("rotary_emb.inv_freq"):
                continue
            if name == "lm_head.weight" and cfg.tie_word_embeddings:
                continue  # some tied checkpoints store the shared matrix twice
            target, offset, rows = name, 0, None
            for shard, (fused_name, shard_offset, shard_rows) in shards.items():
                if f".{shard}." in name:
                    target, offset, rows = name.replace(shard, fused_name), shard_offset, shard_rows
                    break
            if target not in params:
                raise BubblelabError(
                    f"checkpoint tensor {hf_name!r} has no place in a {cfg.architecture} model"
                )
            loaded.add((target, offset))
            module = self.get_submodule(target.rpartition(".")[0])
            if isinstance(module, ParallelModule) and self.tp.size > 1:
                full = (rows or module.full_shape()[0], *module.full_shape()[1:])
                _check_shape(hf_name, tensor, full)
                tensor = module.shard_weight(tensor)  # this rank's part of the weight or section
                offset, rows = offset // self.tp.size, rows and rows // self.tp.size
            dest = params[target] if rows is None else params[target].narrow(0, offset, rows)
            _check_shape(hf_name, tensor, dest.shape)
            dest.copy_(tensor)
        for name in params:
            offsets = {off for fused, off, _ in shards.values() if f".{fused}." in name} or {0}
            if any((name, off) not in loaded for off in offsets):
                raise BubblelabError(f"checkpoint lacks weights for {name!r}")


def _check_shape(name: str, tensor: torch.Tensor, expected: Iterable[int]) -> None:
    if tuple(tensor.shape) != tuple(expected):
        raise BubblelabError(
            f"checkpoint tensor {name!r} has shape {tuple(tensor.shape)}, "
            f"expected {tuple(expected)}"
        )
