"""The `rope` fusion (engine/fusion.py): decode attention that normalises, rotates and stores the
step's q/k/v itself gives what the q/k kernel followed by plain decode attention gives, and leaves
the same cache behind.

The fused kernel never reads the cache slot it writes (the step's token comes from registers): here
that slot holds NaN before the call, so a read would show. On CPU both paths run under Triton's
interpreter (tests/triton_interpreter.py); fp32 and fp16, where the interpreter rounds as the GPU
does. The GPU tests compare the compiled kernels in bf16, in a CUDA graph, and the engine's tokens.
"""

from __future__ import annotations

import math

import pytest
import torch

from tests.triton_interpreter import results_by_case, serve_cases

# (group, head_dim, block_size, q/k norm, dtype, num_splits); None = the kernel's own choice
CPU_CASES = [
    (4, 64, 16, True, "fp32", None),
    (2, 128, 32, True, "fp32", 3),
    (1, 64, 16, False, "fp32", 1),
    (4, 64, 16, True, "fp16", 2),
]
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 2e-3}


def make_case(lens, kv_heads, group, dim, block_size, norm, dtype, device, seed=0):
    """Raw QKV rows, shuffled pages, each row's new-token slot filled with NaN (not yet stored)."""
    from bubblelab.engine.models.layers import RotaryEmbedding

    g = torch.Generator().manual_seed(seed)
    heads = kv_heads * group
    pages = [-(-n // block_size) for n in lens]
    width, num_blocks = max(pages), sum(pages) + 1
    tables = torch.zeros(len(lens), width, dtype=torch.int32)
    perm, used = torch.randperm(num_blocks, generator=g).tolist(), 0
    for row, n in enumerate(pages):
        tables[row, :n] = torch.tensor(perm[used : used + n], dtype=torch.int32)
        used += n
    ctx = torch.tensor(lens, dtype=torch.int32)
    positions = (ctx - 1).long()
    slots = tables.long().gather(1, (positions // block_size)[:, None])[:, 0] * block_size
    slots += positions % block_size
    shape = (num_blocks, block_size, kv_heads, dim)
    k_cache, v_cache = torch.randn(shape, generator=g), torch.randn(shape, generator=g)
    for cache in (k_cache, v_cache):
        cache.view(-1, kv_heads, dim)[slots] = math.nan
    qkv = 3 * torch.randn(len(lens), (heads + 2 * kv_heads) * dim, generator=g)
    weights = (None, None)
    if norm:
        weights = tuple(torch.rand(dim, generator=g) + 0.5 for _ in range(2))
    rotary = RotaryEmbedding(dim, 4096, 1e6, None)

    def to(t):
        return None if t is None else t.to(device=device, dtype=dtype)

    return dict(
        qkv=to(qkv),
        k_cache=to(k_cache),
        v_cache=to(v_cache),
        tables=tables.to(device),
        ctx=ctx.to(device),
        positions=positions.to(device),
        slots=slots.to(device),
        cos_sin=rotary.cos_sin_cache.to(device),
        q_weight=to(weights[0]),
        k_weight=to(weights[1]),
        heads=heads,
        kv_heads=kv_heads,
        dim=dim,
    )


def both_paths(c: dict, num_splits: int | None) -> tuple:
    """(unfused out, fused out, unfused caches, fused caches) on copies of one case."""
    from bubblelab.engine.attention.triton_decode import NewToken, paged_decode_attention
    from bubblelab.engine.models.triton_fused import qk_norm_rope_store

    heads, kv_heads, dim, eps = c["heads"], c["kv_heads"], c["dim"], 1e-6
    scale = dim**-0.5
    plain = c["k_cache"].clone(), c["v_cache"].clone()
    q, _, _ = qk_norm_rope_store(
        c["qkv"], c["positions"], c["cos_sin"], heads, kv_heads, dim,
        c["q_weight"], c["k_weight"], eps, *plain, c["slots"],
    )  # fmt: skip
    unfused = paged_decode_attention(q, *plain, c["tables"], c["ctx"], scale, num_splits)
    folded = c["k_cache"].clone(), c["v_cache"].clone()
    token = NewToken(c["positions"], c["cos_sin"], c["q_weight"], c["k_weight"], eps, c["slots"])
    raw_q = c["qkv"][:, : heads * dim].view(-1, heads, dim)
    fused = paged_decode_attention(
        raw_q, *folded, c["tables"], c["ctx"], scale, num_splits, new_token=token
    )
    return unfused, fused, plain, folded


def largest(a: torch.Tensor, b: torch.Tensor) -> float:
    """The largest difference, NaN where either has a NaN the other has not."""
    if not torch.equal(a.isnan(), b.isnan()):
        return math.nan
    return (a.float().nan_to_num() - b.float().nan_to_num()).abs().max().item()


def run_cpu_case(group, dim, block_size, norm, dtype, num_splits) -> dict:
    # lengths: one token, a full page, the first token of a tile, mid-page, several 64-token tiles
    lens = [1, block_size, 65, block_size + 5, 150]
    c = make_case(lens, 2, group, dim, block_size, norm, DTYPES[dtype], "cpu", seed=group)
    unfused, fused, plain, folded = both_paths(c, num_splits)
    return {
        "out": largest(unfused, fused),
        "k_cache": largest(plain[0], folded[0]),
        "v_cache": largest(plain[1], folded[1]),
        "finite": bool(torch.isfinite(fused).all()),
    }


@pytest.fixture(scope="module")
def cpu_results() -> dict:
    return results_by_case(__file__, CPU_CASES)


@pytest.mark.parametrize("case", CPU_CASES, ids=lambda c: "g{}-d{}-bs{}-n{}-{}-s{}".format(*c))
def test_interpreted_fused_matches_unfused(cpu_results, case):
    r = cpu_results[tuple(case)]
    assert "error" not in r, r.get("error")
    tol = TOL[DTYPES[case[4]]]
    assert r["finite"], r
    assert r["out"] < tol, r
    # the same cache afterwards: every slot it stored, and nothing else touched
    assert r["k_cache"] < tol and r["v_cache"] == 0.0, r


def test_the_raw_q_must_be_a_view_of_the_qkv_rows():
    pytest.importorskip("triton")
    from bubblelab.engine.attention.triton_decode import NewToken, paged_decode_attention

    c = make_case([5, 3], 1, 2, 64, 16, False, torch.float32, "cpu")
    token = NewToken(c["positions"], c["cos_sin"], None, None, 1e-6, c["slots"])
    q = torch.zeros(2, 2, 64)  # contiguous: no room for a row's k and v after its q
    with pytest.raises(ValueError, match="the q part of the QKV projection's rows"):
        paged_decode_attention(
            q, c["k_cache"], c["v_cache"], c["tables"], c["ctx"], 0.125, new_token=token
        )


# -- GPU (tests/conftest.py skips these without CUDA) ----------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("batch", [1, 8, 128])
@torch.inference_mode()
def test_gpu_fused_matches_unfused_and_replays_in_a_graph(batch):
    from bubblelab.engine.attention.triton_decode import NewToken, paged_decode_attention

    g = torch.Generator().manual_seed(batch)
    lens = [1789] if batch == 1 else torch.randint(1, 2049, (batch,), generator=g).tolist()
    c = make_case(lens, 8, 4, 128, 16, True, torch.bfloat16, "cuda", seed=batch)  # qwen3-4b
    for splits in (None, 1, 7):
        unfused, fused, plain, folded = both_paths(c, splits)
        torch.testing.assert_close(fused, unfused, atol=2e-2, rtol=2e-2)
        assert largest(plain[0], folded[0]) <= 2e-2 and largest(plain[1], folded[1]) == 0.0
    # captured once, replayed on new rows: the same as the unfused kernels on those rows
    token = NewToken(c["positions"], c["cos_sin"], c["q_weight"], c["k_weight"], 1e-6, c["slots"])
    raw_q = c["qkv"][:, : c["heads"] * 128].view(-1, c["heads"], 128)
    caches = c["k_cache"].clone(), c["v_cache"].clone()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = paged_decode_attention(
            raw_q, *caches, c["tables"], c["ctx"], 128**-0.5, new_token=token
        )
    c["qkv"].normal_()
    graph.replay()
    unfused, _, plain, _ = both_paths(c, None)
    torch.testing.assert_close(captured, unfused, atol=2e-2, rtol=2e-2)
    assert largest(plain[0], caches[0]) <= 2e-2


@pytest.mark.gpu
@pytest.mark.parametrize("preset", ["tiny-qwen3", "smollm2-135m"])
def test_gpu_engine_tokens_with_rope_in_attention(preset):
    from bubblelab.engine import fusion
    from bubblelab.engine.loader import load_model
    from bubblelab.engine.sampling_params import SamplingParams
    from tests.engine_helpers import Req, make_engine, run_script

    reqs = [
        Req(
            f"r{i}",
            list(range(3 + 7 * i, 8 + 16 * i)),
            SamplingParams(max_tokens=40, ignore_eos=True),
        )
        for i in range(6)
    ]
    tokens = {}
    for fused in ("none", "rope"):
        with fusion.using(fused):  # graphs are captured when the engine is made
            # fp32: greedy argmax of random weights must not flip on a summation order
            loaded = load_model(
                preset, dtype="fp32", device="cuda", seed=4, attention_backend="triton"
            )
            engine = make_engine(
                loaded, device="cuda", dtype="fp32", block_size=16, attention_backend="triton"
            )
            tokens[fused] = run_script(engine, reqs).tokens
            assert engine.runner.graphs.decode_replays > 0
            engine.close()
    assert tokens["rope"] == tokens["none"]


if __name__ == "__main__":  # the subprocess of cpu_results: TRITON_INTERPRET=1 is set already
    serve_cases(run_cpu_case)
