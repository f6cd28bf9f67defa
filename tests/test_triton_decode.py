"""The Triton paged decode kernel against a dense reference (gather pages + masked SDPA in fp32).

On CPU the kernel runs under Triton's interpreter. Triton reads TRITON_INTERPRET when `@triton.jit`
decorates (its own tl.* helpers included, at `import triton`), so the CPU cases run in one
subprocess that sets it before importing anything; results come back as JSON, one pytest case each.
The GPU tests run the compiled kernel.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from tests.triton_interpreter import results_by_case, serve_cases

# (group, head_dim, block_size, dtype, num_splits); None = the kernel's own choice (4 SMs assumed on
# CPU).
CPU_CASES = [
    (1, 64, 16, "fp32", None),
    (3, 64, 16, "fp32", 1),
    (3, 64, 32, "bf16", None),
    (4, 128, 32, "fp32", 3),
    (4, 64, 16, "fp16", 2),
    (8, 128, 16, "bf16", 2),
    (8, 64, 16, "fp32", None),
    (1, 128, 32, "fp32", 1),
    (2, 64, 128, "fp32", 2),  # pages larger than the kernel's 64-token tile
]
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
TOL = {torch.float32: 1e-4, torch.bfloat16: 2e-2, torch.float16: 5e-3}


def make_case(
    batch_lens: list[int],
    kv_heads: int,
    group: int,
    head_dim: int,
    block_size: int,
    dtype: torch.dtype,
    device: str,
    seed: int = 0,
    table_width: int | None = None,
    pad_row: bool = True,
):
    """Shuffled pages per row; unused table entries and the scratch page hold NaN, so any read past
    a row's context shows up. pad_row: one more row, as a padded graph row: context 1 on the scratch
    page's slot 0."""
    g = torch.Generator().manual_seed(seed)
    pages_per_row = [-(-n // block_size) for n in batch_lens]
    width = table_width or max(max(pages_per_row), 1)
    num_blocks = sum(pages_per_row) + 2
    scratch = num_blocks  # one extra page, as ModelRunner allocates
    shape = (num_blocks + 1, block_size, kv_heads, head_dim)
    k_cache, v_cache = torch.randn(shape, generator=g), torch.randn(shape, generator=g)
    k_cache[scratch], v_cache[scratch] = math.nan, math.nan
    k_cache[scratch, 0], v_cache[scratch, 0] = torch.randn(2, kv_heads, head_dim, generator=g)
    tables = torch.full((len(batch_lens) + pad_row, width), scratch, dtype=torch.int32)
    perm, used = torch.randperm(num_blocks, generator=g).tolist(), 0
    for row, (n, pages) in enumerate(zip(batch_lens, pages_per_row, strict=True)):
        tables[row, :pages] = torch.tensor(perm[used : used + pages], dtype=torch.int32)
        used += pages
        if n % block_size:  # the last page's slots past the context: stale in the engine, NaN here
            last = tables[row, pages - 1]
            k_cache[last, n % block_size :], v_cache[last, n % block_size :] = math.nan, math.nan
    lens = torch.tensor(batch_lens + [1] * pad_row, dtype=torch.int32)
    q = torch.randn(len(lens), kv_heads * group, head_dim, generator=g)
    q, k_cache, v_cache = (t.to(device=device, dtype=dtype) for t in (q, k_cache, v_cache))
    return q, k_cache, v_cache, tables.to(device), lens.to(device)


def reference(q, k_cache, v_cache, tables, lens, scale) -> torch.Tensor:
    """fp32 gather + additive mask + SDPA, grouped query heads as query rows; rows of length 0 give
    zeros."""
    batch, heads, dim = q.shape
    kv_heads = k_cache.shape[2]
    ks, vs = (
        c.float().nan_to_num()[tables.long()].flatten(1, 2).transpose(1, 2)
        for c in (k_cache, v_cache)
    )
    visible = torch.arange(ks.shape[2], device=q.device)[None, :] < lens.clamp(min=1)[:, None]
    bias = torch.zeros(visible.shape, device=q.device).masked_fill(~visible, -math.inf)[
        :, None, None, :
    ]
    o = F.scaled_dot_product_attention(
        q.float().view(batch, kv_heads, -1, dim), ks, vs, attn_mask=bias, scale=scale
    )
    return o.reshape(batch, heads, dim).masked_fill((lens == 0)[:, None, None], 0.0)


def run_cpu_case(
    group: int, head_dim: int, block_size: int, dtype: str, num_splits: int | None
) -> dict:
    from bubblelab.engine.attention.triton_decode import paged_decode_attention

    torch.manual_seed(0)
    # Lengths: 1, exactly one and two pages, mid-page, and a few tiles (the kernel's tile is 64
    # tokens).
    lens = [1, block_size, 2 * block_size, block_size + 5, 150]
    q, k, v, tables, ctx = make_case(
        lens, 2, group, head_dim, block_size, DTYPES[dtype], "cpu", seed=group
    )
    scale = head_dim**-0.5
    out = paged_decode_attention(q, k, v, tables, ctx, scale, num_splits=num_splits)
    ref = reference(q, k, v, tables, ctx, scale)
    err = (out.float() - ref).abs().max().item()
    # A row of length 0 must give zeros, not NaN.
    ctx0 = ctx.clone()
    ctx0[0] = 0
    zero = paged_decode_attention(q, k, v, tables, ctx0, scale, num_splits=num_splits)[0]
    return {
        "err": err,
        "dtype": str(out.dtype),
        "finite": bool(torch.isfinite(out).all()),
        "zero_row": float(zero.float().abs().max()) if torch.isfinite(zero).all() else math.nan,
    }


@pytest.fixture(scope="module")
def cpu_results() -> dict:
    return results_by_case(__file__, CPU_CASES)


@pytest.mark.parametrize("case", CPU_CASES, ids=lambda c: "g{}-d{}-bs{}-{}-s{}".format(*c))
def test_interpreted_kernel_matches_dense_reference(cpu_results, case):
    r = cpu_results[tuple(case)]
    assert "error" not in r, r.get("error")
    assert r["finite"] and r["dtype"] == str(DTYPES[case[3]])
    assert r["err"] < TOL[DTYPES[case[3]]], r
    assert r["zero_row"] == 0.0, r


def test_select_backend_triton():
    from bubblelab.core.errors import BubblelabError
    from bubblelab.engine.attention import select_backend

    with pytest.raises(BubblelabError, match="triton needs a CUDA device"):
        select_backend("triton", "cpu")
    assert select_backend("auto", "cpu").name == "torch"
    with pytest.raises(BubblelabError, match="flash-attn or triton"):
        select_backend("xformers", "cpu")


def test_default_split_count():
    pytest.importorskip("triton")
    from bubblelab.engine.attention.triton_decode import MAX_SPLITS, default_num_splits

    cuda = torch.device("cuda")
    assert (
        default_num_splits(1, 1, 1, 16, torch.device("cpu")) == 1
    )  # one 64-token tile: nothing to split
    assert 1 <= default_num_splits(1, 8, 128, 16, torch.device("cpu")) <= MAX_SPLITS
    if torch.cuda.is_available():
        assert default_num_splits(128, 8, 128, 16, cuda) == 1  # the batch alone fills the GPU


# -- GPU (tests/conftest.py skips these without CUDA) ----------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("batch", [1, 32, 128])
@torch.inference_mode()
def test_gpu_kernel_matches_reference_and_replays_in_a_graph(batch):
    from bubblelab.engine.attention.triton_decode import paged_decode_attention

    group, kv_heads, dim, block_size = 4, 8, 128, 16  # qwen3-4b: 32 heads, 8 KV heads
    g = torch.Generator().manual_seed(batch)
    # Batch 1: one long row. Otherwise fixed edge lengths, random ones, and a padded row last.
    lens = [1, block_size, 2048, 150, 1000] + torch.randint(1, 2049, (batch,), generator=g).tolist()
    lens = [1789] if batch == 1 else lens[: batch - 1]
    q, k, v, tables, ctx = make_case(
        lens,
        kv_heads,
        group,
        dim,
        block_size,
        torch.bfloat16,
        "cuda",
        seed=batch,
        table_width=2048 // block_size,
        pad_row=batch > 1,
    )
    assert q.shape[0] == batch
    scale = dim**-0.5
    ref = reference(q, k, v, tables, ctx, scale)
    for splits in (None, 1, 7):
        out = paged_decode_attention(q, k, v, tables, ctx, scale, num_splits=splits)
        torch.testing.assert_close(out.float(), ref, atol=2e-2, rtol=2e-2)

    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        paged_decode_attention(q, k, v, tables, ctx, scale)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = paged_decode_attention(q, k, v, tables, ctx, scale)
    # New values in the same buffers: longer and shorter contexts, other queries.
    ctx.copy_(torch.randint(1, 2049, ctx.shape, device="cuda", dtype=torch.int32))
    q.normal_()
    k.nan_to_num_()
    v.nan_to_num_()
    graph.replay()
    torch.testing.assert_close(
        captured.float(), reference(q, k, v, tables, ctx, scale), atol=2e-2, rtol=2e-2
    )


@pytest.mark.gpu
@pytest.mark.parametrize("preset", ["tiny-qwen3", "smollm2-135m"])
def test_gpu_engine_with_triton_backend_matches_torch_backend(preset):
    from bubblelab.engine.loader import load_model
    from bubblelab.engine.sampling_params import SamplingParams
    from tests.engine_helpers import Req, make_engine, run_script

    reqs = [
        Req(
            f"r{i}",
            list(range(3 + 7 * i, 3 + 7 * i + 5 + 9 * i)),
            SamplingParams(max_tokens=40, ignore_eos=True),
        )
        for i in range(6)
    ]
    tokens = {}
    for backend in ("torch", "triton"):
        # fp32: greedy argmax of random weights must not flip on bf16 rounding differences between
        # kernels.
        loaded = load_model(preset, dtype="fp32", device="cuda", seed=4, attention_backend=backend)
        assert loaded.model.attn_backend.name == backend
        engine = make_engine(
            loaded, device="cuda", dtype="fp32", block_size=16, attention_backend=backend
        )
        tokens[backend] = run_script(engine, reqs).tokens
        assert engine.runner.graphs.decode_replays > 0
        engine.close()
    assert tokens["triton"] == tokens["torch"]


if __name__ == "__main__":  # the subprocess of cpu_results: TRITON_INTERPRET=1 is set already
    serve_cases(run_cpu_case)
