"""One GPU call that says whether flash-attn-4 (CuTe DSL) works here, for the engine and for
nano-vllm.

Run from the repository root after tools/gpu_machine/unstage_flash_attn.sh has extracted the staged
tree and its env.sh is sourced:

    source .device/remote-setup.sh && bash tools/gpu_machine/unstage_flash_attn.sh \
        && source /tmp/fa4site/env.sh && python -m tools.gpu_machine.fa4_smoke --out $OUT

Stages (each in its own try/except, one line each, full traceback in the JSON; JSON rewritten after
every stage so a timeout still leaves the finished ones in --out):
  env            versions (torch, CUDA, driver, cutlass-dsl, FA4, quack, tvm-ffi, cuda-bindings,
                 ...)
  import         cutlass, cutlass.cute, flash_attn (the FA2-API shim, on by default),
                 flash_attn.cute
  prefill        varlen causal, qwen3-like (32 q heads, 8 kv heads, D=128, bf16) vs SDPA; compile +
                 timing
  decode_p{N}    paged decode via page_table for page sizes N (128 = the SM90 TMA path), vs SDPA;
                 timing
  decode_pad-1   page_table padded with -1 and unused pages full of NaN (what nano-vllm hands over)
  decode_len0    rows with seqused_k = 0 (padded CUDA-graph rows) must come out finite
  decode_graph   CUDA-graph capture of the decode call, replayed with new lengths and tables
  default_cuda   prefill with torch.set_default_device("cuda") (how nano-vllm runs its warm-up)
  shim           flash_attn.flash_attn_varlen_func (plain and paged prefix-cache form),
                 flash_attn_with_kvcache
  engine_backend the engine's FlashAttention(impl="fa4") against its TorchAttention
  nanovllm       the original nano-vllm (source in .peers/nano-vllm) generate on seeded random
                 qwen3-0.6b weights through the shim (--skip-nanovllm)
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.metadata as md
import os
import sys
import time
from pathlib import Path

import torch

from tools.gpu_machine.fa4_common import (
    DTYPE,
    HKV,
    SHIM,
    D,
    H,
    Report,
    check,
    cuda_time_ms,
    gather_ref,
    make_paged,
    max_err,
    ref_attn,
)
from tools.gpu_machine.fa4_shim_stages import stage_nanovllm, stage_shim


def stage_env(rep: Report) -> None:
    with rep.stage("env") as rec:
        if rec is None:
            return
        rec["python"] = sys.version.split()[0]
        rec["torch"], rec["torch_cuda"] = torch.__version__, torch.version.cuda
        rec["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")
        wanted = (
            "flash",
            "cutlass",
            "quack",
            "tvm",
            "cuda",
            "nvidia",
            "einops",
            "xxhash",
            "nano",
            "triton",
            "transformers",
            "safetensors",
        )
        rec["dists"] = {
            d.metadata["Name"]: d.version
            for d in md.distributions()
            if d.metadata["Name"] and any(w in d.metadata["Name"].lower() for w in wanted)
        }
        with contextlib.suppress(Exception):
            from cuda.bindings import driver

            rec["driver_cuda"] = driver.cuDriverGetVersion()[1]
        # last: without a GPU the versions above still land
        rec["device"] = torch.cuda.get_device_name()
        rec["capability"] = torch.cuda.get_device_capability()
        rec["summary"] = (
            f"{rec['device']} sm_{''.join(map(str, rec['capability']))}, torch {torch.__version__} "
            f"(CUDA {torch.version.cuda}), driver {rec.get('driver_cuda')}, "
            f"FA4 {rec['dists'].get('flash-attn-4')}, "
            f"cutlass-dsl {rec['dists'].get('nvidia-cutlass-dsl-libs-core')}"
        )


def stage_import(rep: Report) -> object | None:
    fa4 = None
    with rep.stage("import") as rec:
        if rec is None:
            return None
        for name in ("cutlass", "cutlass.cute", "flash_attn", "flash_attn.cute"):
            t = time.perf_counter()
            mod = importlib.import_module(name)
            rec[name] = {
                "file": str(getattr(mod, "__file__", None) or list(getattr(mod, "__path__", []))),
                "s": round(time.perf_counter() - t, 2),
            }
        import cutlass

        rec["cutlass_version"] = getattr(cutlass, "__version__", None)
        fa4 = importlib.import_module("flash_attn.cute").flash_attn_varlen_func
        rec["summary"] = f"flash_attn.cute from {rec['flash_attn.cute']['file']}"
    return fa4


def stage_prefill(rep: Report, fa4, name: str = "prefill", default_cuda: bool = False) -> None:
    with rep.stage(name) as rec:
        if rec is None:
            return
        gen = torch.Generator().manual_seed(0)
        lens = [1, 7, 128, 333, 1024, 2048]
        cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32).cuda()
        q, k, v = (
            torch.randn(sum(lens), h, D, generator=gen).to(DTYPE).cuda() for h in (H, HKV, HKV)
        )
        scale = D**-0.5
        ctx = torch.device("cuda") if default_cuda else contextlib.nullcontext()

        def run():
            with ctx:
                return fa4(
                    q,
                    k,
                    v,
                    cu_seqlens_q=cu,
                    cu_seqlens_k=cu,
                    max_seqlen_q=max(lens),
                    max_seqlen_k=max(lens),
                    softmax_scale=scale,
                    causal=True,
                )[0]

        t = time.perf_counter()
        out = run()
        torch.cuda.synchronize()
        rec["first_call_s"] = round(time.perf_counter() - t, 2)
        ref = torch.cat(
            [
                ref_attn(q[a:b], k[a:b], v[a:b], scale)
                for a, b in zip(cu[:-1].tolist(), cu[1:].tolist(), strict=True)
            ]
        )
        check(rec, max_err(out, ref), "vs_sdpa")
        rec["ms"] = cuda_time_ms(run)
        flops = sum(4 * n * (n + 1) / 2 * D * H for n in lens)
        rec["tflops"] = round(flops / rec["ms"] / 1e9, 1)
        rec["summary"] = (
            f"tokens {sum(lens)}: err {rec['max_abs_err_vs_sdpa']:.2g}, first call "
            f"{rec['first_call_s']} s, {rec['ms']:.3f} ms ({rec['tflops']} TFLOP/s)"
        )


def stage_decode(
    rep: Report,
    fa4,
    page: int,
    name: str,
    pad: int = 0,
    nan_unused: bool = False,
    zero_rows: bool = False,
    batch: int = 64,
) -> None:
    with rep.stage(name) as rec:
        if rec is None:
            return
        gen = torch.Generator().manual_seed(page)
        lens = torch.randint(1, 2049, (batch,), generator=gen).tolist()
        if zero_rows:
            lens[-4:] = [0, 0, 0, 0]
        k_cache, v_cache, table = make_paged(lens, page, pad, nan_unused, gen)
        q = torch.randn(batch, 1, H, D, generator=gen).to(DTYPE).cuda()
        seqused = torch.tensor(lens, dtype=torch.int32).cuda()
        scale = D**-0.5

        def run():
            return fa4(
                q,
                k_cache,
                v_cache,
                seqused_k=seqused,
                page_table=table,
                softmax_scale=scale,
                causal=True,
            )[0]

        t = time.perf_counter()
        out = run()
        torch.cuda.synchronize()
        rec["first_call_s"] = round(time.perf_counter() - t, 2)
        check(rec, max_err(out, gather_ref(q, k_cache, v_cache, table, lens, scale)), "vs_sdpa")
        rec["ms"] = cuda_time_ms(run)
        kv_bytes = sum(lens) * HKV * D * 2 * 2
        rec["GBps"] = round(kv_bytes / rec["ms"] / 1e6, 1)
        rec["summary"] = (
            f"B={batch} page={page} pad={pad}: err {rec['max_abs_err_vs_sdpa']:.2g}, first call "
            f"{rec['first_call_s']} s, {rec['ms']:.3f} ms ({rec['GBps']} GB/s of KV)"
        )


def stage_decode_graph(rep: Report, fa4, page: int = 128, batch: int = 64) -> None:
    with rep.stage("decode_graph") as rec:
        if rec is None:
            return
        gen = torch.Generator().manual_seed(7)
        lens = torch.randint(1, 2049, (batch,), generator=gen).tolist()
        k_cache, v_cache, table = make_paged(lens, page, 0, False, gen)
        q = torch.randn(batch, 1, H, D, generator=gen).to(DTYPE).cuda()
        seqused = torch.tensor(lens, dtype=torch.int32).cuda()
        scale = D**-0.5
        static_table = table.clone()
        out = fa4(
            q,
            k_cache,
            v_cache,
            seqused_k=seqused,
            page_table=static_table,
            softmax_scale=scale,
            causal=True,
        )[0]  # warm-up / compile outside capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = fa4(
                q,
                k_cache,
                v_cache,
                seqused_k=seqused,
                page_table=static_table,
                softmax_scale=scale,
                causal=True,
            )[0]
        # Replay with other lengths (shorter, so the same pages suffice) and a permuted table.
        new_lens = [max(1, n // 2) for n in lens]
        perm = torch.randperm(batch, generator=gen)
        seqused.copy_(torch.tensor(new_lens, dtype=torch.int32)[perm])
        static_table.copy_(table[perm.cuda()])
        q.copy_(torch.randn(batch, 1, H, D, generator=gen).to(DTYPE))
        graph.replay()
        torch.cuda.synchronize()
        ref = gather_ref(q, k_cache, v_cache, static_table, seqused.tolist(), scale)
        check(rec, max_err(out, ref), "replay_vs_sdpa")
        rec["replay_ms"] = cuda_time_ms(graph.replay)
        err = rec["max_abs_err_replay_vs_sdpa"]
        rec["summary"] = f"captured, replay err {err:.2g}, {rec['replay_ms']:.3f} ms"


def stage_engine_backend(rep: Report, page: int = 128) -> None:
    with rep.stage("engine_backend") as rec:
        if rec is None:
            return
        from bubblelab.engine.attention.flash_backend import FlashAttention
        from bubblelab.engine.attention.metadata import AttentionMetadata
        from bubblelab.engine.attention.torch_backend import TorchAttention

        gen = torch.Generator().manual_seed(11)
        fa, ta, scale = FlashAttention(impl="fa4"), TorchAttention(), D**-0.5
        lens = [3, 200, 513]
        meta = AttentionMetadata.for_prompts(lens, "cuda")
        q, k, v = (
            torch.randn(sum(lens), h, D, generator=gen).to(DTYPE).cuda() for h in (H, HKV, HKV)
        )
        check(
            rec,
            max_err(
                fa.forward(q, k, v, None, None, meta, scale),
                ta.forward(q, k, v, None, None, meta, scale),
            ),
            "prefill",
        )
        ctx = [1, 129, 1500, 2048]
        k_cache, v_cache, table = make_paged(ctx, page, 0, False, gen)
        dmeta = AttentionMetadata(
            is_prefill=False,
            context_lens=torch.tensor(ctx, dtype=torch.int32).cuda(),
            block_tables=table,
        )
        qd = torch.randn(len(ctx), H, D, generator=gen).to(DTYPE).cuda()
        kv = torch.zeros(len(ctx), HKV, D, dtype=DTYPE, device="cuda")  # decode reads the cache
        got = fa.forward(qd, kv, kv, k_cache, v_cache, fa.prepare(dmeta, k_cache, DTYPE), scale)
        want = ta.forward(qd, kv, kv, k_cache, v_cache, ta.prepare(dmeta, k_cache, DTYPE), scale)
        check(rec, max_err(got, want), "decode")
        rec["summary"] = f"FlashAttention(fa4) == TorchAttention (prefill, decode page {page})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument(
        "--budget-s", type=float, default=480, help="skip stages that would start after this"
    )
    ap.add_argument(
        "--no-shim", action="store_true", help="import flash-attn-4 without the FA2-API shim"
    )
    ap.add_argument("--skip-nanovllm", action="store_true")
    ap.add_argument("--pages", default="128,256,16", help="decode page sizes to try")
    ap.add_argument("--model-dir", type=Path, default=Path("/tmp/nanovllm-qwen3-0.6b"))
    args = ap.parse_args()
    if not args.no_shim:
        sys.path.insert(
            0, str(SHIM)
        )  # a regular `flash_attn` whose __path__ also reaches flash_attn/cute
    rep = Report(args.out, args.budget_s)
    stage_env(rep)
    fa4 = stage_import(rep)
    if fa4 is not None:
        stage_prefill(rep, fa4)
        for page in (int(p) for p in args.pages.split(",")):
            stage_decode(rep, fa4, page, f"decode_p{page}")
        stage_decode(rep, fa4, 128, "decode_pad-1", pad=-1, nan_unused=True)
        stage_decode(rep, fa4, 128, "decode_len0", zero_rows=True)
        stage_decode_graph(rep, fa4)
        stage_prefill(rep, fa4, "default_cuda", default_cuda=True)
        stage_engine_backend(rep)
    if not args.no_shim:
        stage_shim(rep)
        if not args.skip_nanovllm:
            stage_nanovllm(rep, args.model_dir)
    ok = [n for n, r in rep.stages.items() if r.get("ok")]
    print(
        f"fa4_smoke: {len(ok)}/{len(rep.stages)} stages ok in {time.monotonic() - rep.t0:.0f} s; "
        f"failed: {[n for n in rep.stages if n not in ok]}",
        flush=True,
    )
    rep.save()


if __name__ == "__main__":
    main()
