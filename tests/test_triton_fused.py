"""The Triton kernels of engine/models/triton_fused.py against the eager chains they replace: q/k
RMSNorm + RoPE + KV-cache store (Attention.qkv_to_cache: RMSNorm modules, RotaryEmbedding,
store_kv_cache), SiLU-and-mul (SiluAndMul.act) and (add +) RMSNorm (RMSNorm.norm / add_norm).

On CPU the kernel runs under Triton's interpreter, in one subprocess that sets TRITON_INTERPRET
before importing anything (tests/triton_interpreter.py). The interpreter casts fp32 to bf16 by
truncation, not rounding, so the CPU cases are fp32 and fp16 (where it rounds as the GPU does); the
GPU case is bf16.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from tests.triton_interpreter import results_by_case, serve_cases

# (tokens, heads, kv heads, head dim, q/k norm, dtype)
CPU_CASES = [
    (5, 4, 2, 64, True, "fp32"),
    (37, 6, 2, 128, True, "fp32"),
    (3, 2, 1, 64, False, "fp32"),
    (37, 6, 2, 128, True, "fp16"),
    (1, 4, 4, 64, False, "fp16"),
]
# (tokens, intermediate size, dtype) for SiLU-and-mul
SILU_CASES = [(3, 1000, "fp32"), (17, 2048, "fp16"), (1, 64, "fp32")]
# (tokens, hidden size, with a residual, dtype) for RMSNorm
NORM_CASES = [(3, 1000, True, "fp32"), (5, 2560, False, "fp16"), (1, 64, True, "fp16")]
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def make_case(tokens, heads, kv_heads, dim, norm, dtype, device, seed=0):
    from bubblelab.engine.models.layers import RMSNorm, RotaryEmbedding

    g = torch.Generator().manual_seed(seed)
    qkv = (3 * torch.randn(tokens, (heads + 2 * kv_heads) * dim, generator=g)).to(dtype)
    positions = torch.randint(0, 500, (tokens,), generator=g)
    rotary = RotaryEmbedding(dim, 512, 1e6, None)
    norms = None
    if norm:
        norms = RMSNorm(dim, 1e-6).to(dtype), RMSNorm(dim, 1e-6).to(dtype)
        with torch.no_grad():
            for n in norms:
                n.weight.copy_(torch.rand(dim, generator=g) + 0.5)
    block_size = 16
    blocks = -(-tokens // block_size) + 2
    slots = torch.randperm(blocks * block_size, generator=g)[:tokens]
    cache = torch.zeros(blocks, block_size, kv_heads, dim, dtype=dtype)
    to = lambda t: t.to(device)  # noqa: E731
    norms = norms and tuple(n.to(device) for n in norms)
    return to(qkv), to(positions), rotary.to(device), norms, to(slots), to(cache)


@torch.no_grad()
def compare(tokens, heads, kv_heads, dim, norm, dtype, device="cpu") -> dict:
    """Both paths on one case: per output, the largest difference and the share of differing
    elements."""
    from bubblelab.engine.attention import store_kv_cache
    from bubblelab.engine.models.triton_fused import qk_norm_rope_store

    qkv, positions, rotary, norms, slots, cache = make_case(
        tokens, heads, kv_heads, dim, norm, DTYPES[dtype], device
    )
    caches = [cache.clone() for _ in range(4)]  # eager k, v; kernel k, v
    q, k, v = qkv.split([heads * dim, kv_heads * dim, kv_heads * dim], dim=-1)
    q, k = q.reshape(tokens, heads, dim), k.reshape(tokens, kv_heads, dim)
    v = v.reshape(tokens, kv_heads, dim)
    if norms:
        q, k = norms[0](q), norms[1](k)
    q, k = rotary(positions, q, k)
    store_kv_cache(k, v, caches[0], caches[1], slots)
    got = qk_norm_rope_store(
        qkv,
        positions,
        rotary.cos_sin_cache,
        heads,
        kv_heads,
        dim,
        norms[0].weight if norms else None,
        norms[1].weight if norms else None,
        1e-6,
        caches[2],
        caches[3],
        slots,
    )
    out = {}
    for name, a, b in zip(
        ("q", "k", "v", "k_cache", "v_cache"),
        (q, k, v, *caches[:2]),
        (*got, *caches[2:]),
        strict=True,
    ):
        assert a.shape == b.shape and a.dtype == b.dtype, name
        out[name] = {
            "max_diff": float((a.float() - b.float()).abs().max()),
            "differ": float((a != b).float().mean()),
        }
    return out


@torch.no_grad()
def compare_silu(tokens, inter, dtype, device="cpu") -> dict:
    from bubblelab.engine.models.layers import SiluAndMul
    from bubblelab.engine.models.triton_fused import silu_and_mul

    g = torch.Generator().manual_seed(tokens)
    x = (4 * torch.randn(tokens, 2 * inter, generator=g)).to(DTYPES[dtype]).to(device)
    want, got = SiluAndMul().act(x), silu_and_mul(x)
    assert want.shape == got.shape and want.dtype == got.dtype
    return {
        "max_rel": float(
            ((want.float() - got.float()).abs() / want.float().abs().clamp(min=1e-3)).max()
        ),
        "differ": float((want != got).float().mean()),
    }


@torch.no_grad()
def compare_norm(tokens, dim, add, dtype, device="cpu") -> dict:
    """The kernel against the module's eager methods: the largest difference relative to the
    output's size, the share of differing elements, and whether the residual sums are equal."""
    from bubblelab.engine.models.layers import RMSNorm
    from bubblelab.engine.models.triton_fused import rms_norm

    g = torch.Generator().manual_seed(dim)
    x, res = (3 * torch.randn(2, tokens, dim, generator=g)).to(DTYPES[dtype]).to(device)
    norm = RMSNorm(dim, 1e-6).to(DTYPES[dtype]).to(device)
    norm.weight.copy_(torch.rand(dim, generator=g) + 0.5)
    if add:
        (want, want_res), (got, got_res) = (
            norm.add_norm(x, res),
            rms_norm(x, norm.weight, 1e-6, res),
        )
        res_equal = bool(torch.equal(want_res, got_res))
    else:
        want, got, res_equal = norm.norm(x), rms_norm(x, norm.weight, 1e-6), True
    assert want.shape == got.shape and want.dtype == got.dtype
    return {
        "max_rel": float(((want.float() - got.float()).abs()).max() / want.float().abs().max()),
        "differ": float((want != got).float().mean()),
        "res_equal": res_equal,
    }


@pytest.fixture(scope="module")
def cpu_results() -> dict:
    return results_by_case(__file__, CPU_CASES + SILU_CASES + NORM_CASES)


@pytest.mark.parametrize("case", NORM_CASES, ids=lambda c: "n{}-d{}-add{}-{}".format(*c))
def test_interpreted_rms_norm_matches_eager(cpu_results, case):
    r = cpu_results[tuple(case)]
    assert "error" not in r, r.get("error")
    d = r["diffs"]
    assert d["res_equal"], r  # the residual sum rounds as eager's add: exact
    # only the fp32 sum of squares runs in another order: an fp32 ulp, rarely one fp16 step
    if case[-1] == "fp32":
        assert d["max_rel"] <= 1e-6, r
    else:
        assert d["differ"] < 0.01 and d["max_rel"] <= 2e-3, r


@pytest.mark.parametrize("case", SILU_CASES, ids=lambda c: "n{}-i{}-{}".format(*c))
def test_interpreted_silu_and_mul_matches_eager(cpu_results, case):
    r = cpu_results[tuple(case)]
    assert "error" not in r, r.get("error")
    # exp differs from the library's in the last bit at most: one rounding step of the dtype
    assert r["diffs"]["max_rel"] <= (2e-6 if case[-1] == "fp32" else 2e-3), r


@pytest.mark.parametrize("case", CPU_CASES, ids=lambda c: "n{}-h{}-kv{}-d{}-norm{}-{}".format(*c))
def test_interpreted_kernel_matches_the_eager_chain(cpu_results, case):
    r = cpu_results[tuple(case)]
    assert "error" not in r, r.get("error")
    # v and its cache slots are copies: exact. q and k round where eager rounds: exact without
    # the norm; with it only the norm's fp32 sum order differs (a few fp32 ulp, which flip an fp16
    # rounding now and then).
    for name in ("v", "v_cache"):
        assert r["diffs"][name]["max_diff"] == 0.0, (name, r)
    for name in ("q", "k", "k_cache"):
        d = r["diffs"][name]
        if not case[4]:
            assert d["max_diff"] == 0.0, (name, r)
        elif case[-1] == "fp32":
            assert d["max_diff"] <= 2e-6, (name, r)
        else:
            assert d["differ"] < 0.01 and d["max_diff"] <= 2e-3, (name, r)


@pytest.mark.gpu  # tests/conftest.py skips these without CUDA
def test_gpu_kernel_matches_the_eager_chain_in_bf16():
    diffs = compare(300, 32, 8, 128, True, "bf16", device="cuda")
    for name in ("v", "v_cache"):
        assert diffs[name]["max_diff"] == 0.0, diffs
    for name in ("q", "k"):  # only the norm's sum order differs: a last-bit flip now and then
        assert diffs[name]["differ"] < 1e-3, diffs
    rope_only = compare(300, 32, 8, 128, False, "bf16", device="cuda")
    assert all(d["max_diff"] == 0.0 for d in rope_only.values()), rope_only  # every rounding kept
    silu = compare_silu(300, 9728, "bf16", device="cuda")
    assert silu["max_rel"] <= 1e-2 and silu["differ"] < 0.01, silu  # one bf16 step, rarely
    for add in (False, True):
        norm = compare_norm(300, 2560, add, "bf16", device="cuda")
        assert norm["res_equal"] and norm["differ"] < 0.01 and norm["max_rel"] <= 1e-2, norm


if __name__ == "__main__":  # the subprocess of cpu_results: TRITON_INTERPRET=1 is set already
    by_length: dict[int, Callable[..., dict]] = {6: compare, 3: compare_silu, 4: compare_norm}
    serve_cases(lambda *case: {"diffs": by_length[len(case)](*case)})
