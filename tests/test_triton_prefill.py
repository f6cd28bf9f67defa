"""The Triton varlen prefill kernel against the per-sequence SDPA loop, and a whole model's forward
at a CUDA graph's padded shape against the exact batch.

On CPU the kernel runs under Triton's interpreter, which reads TRITON_INTERPRET when the kernel is
decorated: the cases run in one subprocess that sets it first, and report JSON, one pytest case each
(as in test_triton_decode.py). The GPU tests run the compiled kernel.
"""

from __future__ import annotations

import json
import sys

import pytest
import torch

from bubblelab.engine.loader import load_model
from tests.triton_interpreter import run_interpreted

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
TOL = {"fp32": 1e-5, "bf16": 2e-2, "fp16": 5e-3}
# (lengths, padded rows, padded tokens, heads, kv heads, head_dim, dtype)
KERNEL_CASES = [
    ([5, 1, 17, 0, 70, 3], 2, 9, 4, 2, 16, "fp32"),  # an empty row, lengths across tiles, padding
    ([130], 0, 0, 8, 2, 32, "fp32"),  # one sequence over three 64-token tiles
    ([1, 1, 1], 1, 60, 4, 4, 16, "bf16"),
    ([33, 64, 65], 0, 3, 6, 3, 64, "fp16"),
    ([64, 64], 70, 0, 4, 1, 16, "fp32"),  # more padded rows than one cu_seqlens search step (64)
]


def qkv(total: int, heads: int, kv_heads: int, head_dim: int, dtype: torch.dtype, device="cpu"):
    g = torch.Generator().manual_seed(total * 31 + heads)
    return [
        torch.randn(total, h, head_dim, generator=g).to(device, dtype)
        for h in (heads, kv_heads, kv_heads)
    ]


def cu_seqlens(lens: list[int], padded_rows: int, device="cpu") -> torch.Tensor:
    cu = [0, *torch.tensor(lens).cumsum(0).tolist()] if lens else [0]
    return torch.tensor(cu + [sum(lens)] * padded_rows, dtype=torch.int32, device=device)


def run_kernel_case(case: list) -> dict:
    from bubblelab.engine.attention.metadata import AttentionMetadata
    from bubblelab.engine.attention.prefill import loop_attention
    from bubblelab.engine.attention.triton_prefill import varlen_prefill_attention

    lens, pad_rows, pad_tokens, heads, kv_heads, head_dim, dtype = case
    total = sum(lens)
    q, k, v = qkv(total + pad_tokens, heads, kv_heads, head_dim, DTYPES[dtype])
    scale = head_dim**-0.5
    out = varlen_prefill_attention(q, k, v, cu_seqlens(lens, pad_rows), scale)
    real = [n for n in lens if n]
    meta = AttentionMetadata.for_prompts(real)
    ref = loop_attention(q[:total].float(), k[:total].float(), v[:total].float(), meta, scale)
    return {
        "err": (out[:total].float() - ref).abs().max().item() if total else 0.0,
        "padding": out[total:].float().abs().max().item() if pad_tokens else 0.0,
        "finite": bool(torch.isfinite(out).all()),
    }


def run_static_forward() -> dict:
    """tiny-qwen3 with the Triton backend: the forward at a graph's shape (tokens padded to a
    bucket, rows padded, no host lengths) gives the exact batch's hidden states at every real
    token."""
    from bubblelab.engine.attention.metadata import AttentionMetadata
    from bubblelab.engine.attention.triton_backend import TritonAttention
    from bubblelab.engine.loader import load_model
    from bubblelab.engine.models.transformer import Attention

    loaded = load_model("tiny-qwen3", dtype="fp32", device="cpu", seed=1, attention_backend="torch")
    model = loaded.model
    backend = TritonAttention()
    model.attn_backend = backend
    for module in model.modules():
        if isinstance(module, Attention):
            module.backend = backend
    lens, tokens, rows = [7, 1, 20], 64, 8
    total = sum(lens)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, loaded.config.vocab_size, (tokens,), generator=g)
    positions = torch.cat(
        [torch.arange(n) for n in lens] + [torch.zeros(tokens - total, dtype=torch.long)]
    )
    with torch.inference_mode():
        exact = model(ids[:total], positions[:total], AttentionMetadata.for_prompts(lens))
        static = AttentionMetadata(
            is_prefill=True, cu_seqlens=cu_seqlens(lens, rows - len(lens)), max_seqlen=tokens
        )
        padded = model(ids, positions, static)
    return {"err": (padded[:total] - exact).abs().max().item()}


@pytest.fixture(scope="module")
def cpu_results() -> dict:
    return run_interpreted(__file__, KERNEL_CASES, timeout=600)


@pytest.mark.parametrize("index", range(len(KERNEL_CASES)))
def test_interpreted_kernel_matches_the_per_sequence_loop(cpu_results, index):
    r, case = cpu_results["kernel"][index], KERNEL_CASES[index]
    assert r["finite"]
    assert r["err"] <= TOL[case[-1]], r
    assert r["padding"] == 0.0  # padded tokens get zeros, never garbage or NaN


def test_graph_shaped_forward_equals_the_exact_batch(cpu_results):
    assert cpu_results["static"]["err"] <= 1e-5, cpu_results["static"]


@pytest.mark.gpu
@pytest.mark.parametrize("heads,kv_heads,head_dim", [(16, 8, 128), (32, 8, 128), (9, 3, 64)])
def test_cuda_kernel_matches_the_loop_in_bf16(heads, kv_heads, head_dim):
    from bubblelab.engine.attention.metadata import AttentionMetadata
    from bubblelab.engine.attention.prefill import loop_attention
    from bubblelab.engine.attention.triton_prefill import varlen_prefill_attention

    lens = [1, 32, 7, 100, 33, 32, 2, 700]
    total = sum(lens)
    q, k, v = qkv(total + 50, heads, kv_heads, head_dim, torch.bfloat16, "cuda")
    scale = head_dim**-0.5
    got = varlen_prefill_attention(q, k, v, cu_seqlens(lens, 5, "cuda"), scale)
    ref = loop_attention(
        *(x[:total].float() for x in (q, k, v)), AttentionMetadata.for_prompts(lens, "cuda"), scale
    )
    torch.testing.assert_close(got[:total].float(), ref, atol=2e-2, rtol=2e-2)
    assert got[total:].abs().max().item() == 0.0


@pytest.mark.gpu
@pytest.mark.parametrize("depth", [1, 2])
def test_cuda_prefill_graphs_match_eager_and_fall_back_beyond_the_largest_bucket(depth):
    """Prefills replayed from token-bucket graphs give the eager engine's tokens; a prompt longer
    than the largest bucket (it is admitted alone, past the token budget) runs eagerly, and nothing
    is lost."""
    from bubblelab.engine.sampling_params import SamplingParams
    from tests.engine_helpers import Req, make_engine, run_script

    loaded = load_model(
        "tiny-qwen3", dtype="bf16", device="cuda", seed=5, attention_backend="triton"
    )
    g = torch.Generator().manual_seed(1)
    lens = [3, 17, 40, 1, 90, 64, 9, 33, 150, 5]  # 150 > the largest bucket (64)
    reqs = [
        Req(
            f"r{i}",
            torch.randint(0, 500, (n,), generator=g).tolist(),
            SamplingParams(max_tokens=12, ignore_eos=True),
            arrive_tick=i % 4,
        )
        for i, n in enumerate(lens)
    ]
    outcomes, replays = {}, {}
    for eager in (True, False):
        engine = make_engine(
            loaded,
            device="cuda",
            depth=depth,
            block_size=16,
            num_kv_blocks=256,
            max_num_batched_tokens=64,
            max_model_len=256,
            enforce_eager=eager,
        )
        outcomes[eager] = run_script(engine, reqs)
        replays[eager] = engine.runner.graphs.prefill_replays
        engine.close()
    assert replays[True] == 0 and replays[False] > 0
    assert outcomes[False].tokens == outcomes[True].tokens
    assert all(len(t) == 12 for t in outcomes[False].tokens.values())


if __name__ == "__main__":  # the interpreted cases, in a process that set TRITON_INTERPRET first
    cases = json.loads(sys.argv[1])
    print(
        json.dumps({"kernel": [run_kernel_case(c) for c in cases], "static": run_static_forward()})
    )
