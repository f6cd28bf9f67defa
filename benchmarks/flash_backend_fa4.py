"""Candidate drop-in for engine/attention/flash_backend.py: attention through flash-attn-4 (CuTe DSL) instead of FA2.

Same class interface (engine.attention.base.AttentionBackend): name, block_size_multiple, prepare(), forward().
Not wired into the engine; benchmarks/fa4_smoke.py checks it against the torch backend on the GPU.

What it needs:
  - flash-attn-4 4.0.0b36 + nvidia-cutlass-dsl 4.8.1 (libs-core, libs-base, libs-cu13) + quack-kernels + einops
    importable, and apache-tvm-ffi (the GPU machine gets it from .device/); see benchmarks/stage_flash_attn.py.
  - SM90 or SM100 (FA4 also has SM80/SM120 paths, without paged KV on SM120); bf16 or fp16; head_dim a multiple
    of 8 up to 256 on SM90 (128 on SM100 except 192/128 and 256/256); GQA with heads % kv_heads == 0.
  - int32 cu_seqlens / context_lens / block_tables (the engine's metadata already is).
  - Pages: any block_size (block_size_multiple = 1). block_size == the kernel's key tile (128 at head_dim 128
    on SM90) loads whole pages by TMA, the fast path; other sizes use a cp.async gather. The TMA path reads
    the unused tail rows of a sequence's last page: they must be finite (the engine's cache starts zeroed).
  - Block-table entries past a sequence's pages should not be read (fa4_smoke's decode_pad-1 checks it); the
    engine pads with its scratch page anyway.
  - First call per shape family compiles (CuTe DSL JIT, seconds); compiled kernels are cached on disk
    (/tmp/<user>/flash_attention_cute_dsl_cache, or $CUTE_DSL_CACHE_DIR). Warm up before CUDA-graph capture,
    which the engine's warmup already does.
"""
from __future__ import annotations

import torch
from flash_attn.cute import flash_attn_varlen_func

from engine.attention.metadata import AttentionMetadata


class FlashAttention4:
    name = "flash-attn"
    block_size_multiple = 1

    def prepare(self, meta: AttentionMetadata, k_cache: torch.Tensor | None, dtype: torch.dtype
                ) -> AttentionMetadata:
        return meta  # FA4 reads context_lens and block_tables directly

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                k_cache: torch.Tensor | None, v_cache: torch.Tensor | None,
                meta: AttentionMetadata, scale: float) -> torch.Tensor:
        if meta.is_prefill:
            # Host-side max_seqlen: FA4 sizes its grid from it, so no device read.
            out, _ = flash_attn_varlen_func(q, k, v, cu_seqlens_q=meta.cu_seqlens, cu_seqlens_k=meta.cu_seqlens,
                                            max_seqlen_q=meta.max_seqlen, max_seqlen_k=meta.max_seqlen,
                                            softmax_scale=scale, causal=True)
            return out
        if k_cache is None:
            raise ValueError("decode attention needs a bound KV cache")
        # One query token per row as a batched [B, 1, H, D] query; K/V of the current token are already in the
        # cache, so context_lens (which counts it) is each row's key length.
        out, _ = flash_attn_varlen_func(q.unsqueeze(1), k_cache, v_cache, seqused_k=meta.context_lens,
                                        page_table=meta.block_tables, softmax_scale=scale, causal=True)
        return out.squeeze(1)
