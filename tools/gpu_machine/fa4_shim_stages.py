"""The smoke stages that go through the FA2-API shim: the shim's own functions and the original
nano-vllm on it (tools/gpu_machine/fa4_smoke.py runs them)."""

from __future__ import annotations

import importlib
import sys
import time
from pathlib import Path

import torch

from tools.gpu_machine.fa4_common import (
    DTYPE,
    HKV,
    D,
    H,
    Report,
    check,
    gather_ref,
    make_paged,
    max_err,
    ref_attn,
)


def stage_shim(rep: Report) -> None:
    with rep.stage("shim") as rec:
        if rec is None:
            return
        shim = importlib.import_module("flash_attn")
        if not hasattr(shim, "flash_attn_with_kvcache"):
            raise RuntimeError(f"`flash_attn` is not the shim ({shim}); run without --no-shim")
        rec["backend"] = shim.backend()
        gen = torch.Generator().manual_seed(3)
        scale, page = D**-0.5, 256  # nano-vllm's kvcache_block_size must be a multiple of 256
        lens = [5, 300, 777]
        cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32).cuda()
        q, k, v = (
            torch.randn(sum(lens), h, D, generator=gen).to(DTYPE).cuda() for h in (H, HKV, HKV)
        )
        out = shim.flash_attn_varlen_func(
            q,
            k,
            v,
            max_seqlen_q=max(lens),
            cu_seqlens_q=cu,
            max_seqlen_k=max(lens),
            cu_seqlens_k=cu,
            softmax_scale=scale,
            causal=True,
        )
        ref = torch.cat(
            [
                ref_attn(q[a:b], k[a:b], v[a:b], scale)
                for a, b in zip(cu[:-1].tolist(), cu[1:].tolist(), strict=True)
            ]
        )
        check(rec, max_err(out, ref), "varlen")
        # Prefix cache: keys of the whole sequence are paged, queries are only the uncached suffix.
        klens, qlens = [600, 300, 1000], [88, 300, 1]
        k_cache, v_cache, table = make_paged(klens, page, -1, True, gen)
        cu_q = torch.tensor([0] + list(torch.tensor(qlens).cumsum(0)), dtype=torch.int32).cuda()
        cu_k = torch.tensor([0] + list(torch.tensor(klens).cumsum(0)), dtype=torch.int32).cuda()
        qs = torch.randn(sum(qlens), H, D, generator=gen).to(DTYPE).cuda()
        out = shim.flash_attn_varlen_func(
            qs,
            k_cache,
            v_cache,
            max_seqlen_q=max(qlens),
            cu_seqlens_q=cu_q,
            max_seqlen_k=max(klens),
            cu_seqlens_k=cu_k,
            softmax_scale=scale,
            causal=True,
            block_table=table,
        )
        refs = []
        for b, nk in enumerate(klens):
            pages = table[b, : -(-nk // page)].long()
            kb, vb = (c[pages].flatten(0, 1)[:nk] for c in (k_cache, v_cache))
            refs.append(ref_attn(qs[cu_q[b] : cu_q[b + 1]], kb, vb, scale))
        check(rec, max_err(out, torch.cat(refs)), "prefix_cache")
        qd = torch.randn(len(klens), 1, H, D, generator=gen).to(DTYPE).cuda()
        seqlens = torch.tensor(klens, dtype=torch.int32).cuda()
        out = shim.flash_attn_with_kvcache(
            qd,
            k_cache,
            v_cache,
            cache_seqlens=seqlens,
            block_table=table,
            softmax_scale=scale,
            causal=True,
        )
        check(rec, max_err(out, gather_ref(qd, k_cache, v_cache, table, klens, scale)), "kvcache")
        rec["summary"] = (
            f"backend {rec['backend']}: varlen, prefix-cache varlen and kvcache (page 256) "
            "match SDPA"
        )


def stage_nanovllm(rep: Report, model_dir: Path) -> None:
    """The original nano-vllm (source staged in .peers/nano-vllm) on the shim, as its authors ship
    it but for a stub tokenizer (random weights have none)."""
    with rep.stage("nanovllm") as rec:
        if rec is None:
            return
        from benchmarks.peer_nanovllm import (
            NANOVLLM,
            staged_commit,
            stub_tokenizer,
            write_hf_checkpoint,
        )
        from bubblelab.engine.loader import load_model

        rec["commit"] = staged_commit(NANOVLLM)
        if rec["commit"] is None:
            raise RuntimeError(f"no nano-vllm at {NANOVLLM}: tools/gpu_machine/stage_nanovllm.sh")
        sys.path.insert(0, str(NANOVLLM))
        if not (model_dir / "config.json").exists():  # seeded random qwen3-0.6b in HF layout
            loaded = load_model("qwen3-0.6b", dtype="bf16", device="cuda", seed=0)
            write_hf_checkpoint(loaded, model_dir)
            del loaded
            torch.cuda.empty_cache()
        from nanovllm import LLM, SamplingParams

        stub_tokenizer(eos_token_id=151645)
        t = time.perf_counter()
        llm = LLM(
            str(model_dir),
            enforce_eager=False,
            max_model_len=1024,
            max_num_batched_tokens=4096,
            max_num_seqs=32,
            gpu_memory_utilization=0.6,
        )
        rec["init_s"] = round(time.perf_counter() - t, 1)
        gen = torch.Generator().manual_seed(5)
        prompts = [torch.randint(0, 1000, (32,), generator=gen).tolist() for _ in range(32)]
        params = SamplingParams(temperature=1.0, max_tokens=128, ignore_eos=True)
        llm.generate(prompts[:2], params, use_tqdm=False)  # warm-up
        torch.cuda.synchronize()
        t = time.perf_counter()
        outs = llm.generate(prompts, params, use_tqdm=False)
        torch.cuda.synchronize()
        wall = time.perf_counter() - t
        n_tok = sum(len(o["token_ids"]) for o in outs)
        rec.update(wall_s=round(wall, 2), tokens=n_tok, e2e_tok_s=round(n_tok / wall, 1))
        rec["summary"] = (
            f"32 x 128 tokens in {wall:.2f} s ({rec['e2e_tok_s']} tok/s e2e, init "
            f"{rec['init_s']} s incl. compile + graphs)"
        )
