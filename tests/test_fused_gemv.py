"""The one-row GEMV with the norm before it and SiLU * mul after it folded in (engine/fused_gemv.py)
against the eager chain it replaces: RMSNorm (with the residual add), the projection, SiluAndMul.

On CPU the kernel runs under Triton's interpreter in a subprocess (tests/triton_interpreter.py), in
fp32 and fp16 (the interpreter truncates to bf16 where the GPU rounds); the GPU cases are bf16, at
qwen3-4b's shapes, against the engine's unfused kernels.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.pdl_chains import outputs_in_every_mode
from tests.triton_interpreter import results_by_case, serve_cases

# (K, N, block_n, block_k, norm, residual, glu, dtype)
CPU_CASES = [
    (96, 40, 8, 32, True, True, False, "fp32"),  # K a multiple of the tile, N not
    (100, 40, 8, 32, True, False, False, "fp32"),  # uneven K, no residual (the first layer)
    (96, 48, 8, 32, True, True, True, "fp32"),  # norm + SiLU*mul: gate|up's full fold
    (100, 36, 4, 64, False, False, True, "fp16"),  # SiLU*mul alone
    (128, 32, 16, 64, True, True, True, "fp16"),
    (64, 24, 8, 64, False, False, False, "fp32"),  # plain GEMV
]
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def make_case(k, n, norm, residual, glu, dtype, device, seed=0):
    g = torch.Generator().manual_seed(seed + k + n)
    x = (2 * torch.randn(1, k, generator=g)).to(dtype)
    res = (2 * torch.randn(1, k, generator=g)).to(dtype) if residual else None
    nw = (torch.rand(k, generator=g) + 0.5).to(dtype) if norm else None
    w = (torch.randn(2 * n if glu else n, k, generator=g) / k**0.5).to(dtype)
    to = lambda t: None if t is None else t.to(device)  # noqa: E731
    return to(x), to(res), to(nw), to(w)


def eager(x, res, nw, w, eps, glu):
    """The chain as the model computes it unfused: (add +) RMSNorm, rounded at each step, then
    the projection (fp32 products, rounded) and silu(gate) * up."""
    added = x if res is None else x + res
    h = added
    if nw is not None:
        h = nw * F.rms_norm(added.float(), (x.shape[-1],), eps=eps).to(x.dtype)
    y = (h.float() @ w.float().t()).to(x.dtype)
    if glu:
        gate, up = y.chunk(2, dim=-1)
        y = F.silu(gate) * up
    return y, added


@torch.no_grad()
def compare(k, n, block_n, block_k, norm, residual, glu, dtype, device="cpu") -> dict:
    from bubblelab.engine.fused_gemv import fused_gemv
    from bubblelab.engine.triton_gemm import TileConfig

    dt = DTYPES[dtype]
    x, res, nw, w = make_case(k, n, norm, residual, glu, dt, device)
    config = TileConfig(1, block_n, block_k, 4, 3)
    y, added = fused_gemv(x, w, config, norm_weight=nw, eps=1e-6, residual=res, glu=glu)
    ref, ref_added = eager(x, res, nw, w, 1e-6, glu)
    scale = ref.float().abs().max().item()
    return {
        "shape": list(y.shape),
        "dtype": str(y.dtype),
        "err": (y.float() - ref.float()).abs().max().item() / scale,
        "residual_exact": None if added is None else bool(torch.equal(added, ref_added)),
    }


@pytest.fixture(scope="module")
def cpu_results() -> dict:
    return results_by_case(__file__, CPU_CASES)


@pytest.mark.parametrize(
    "case", CPU_CASES, ids=lambda c: "k{}-n{}-bn{}-bk{}-norm{}-res{}-glu{}-{}".format(*c)
)
def test_interpreted_fused_gemv_matches_the_eager_chain(cpu_results, case):
    k, n, _, _, norm, residual, glu, dtype = case
    r = cpu_results[tuple(case)]
    assert "error" not in r, r.get("error")
    assert r["shape"] == [1, n] and r["dtype"] == str(DTYPES[dtype])
    # fp32: sum order only; fp16: one rounding step of an output near the largest
    assert r["err"] < (1e-5 if dtype == "fp32" else 2e-3), r
    assert r["residual_exact"] is (True if residual else None), r


def test_bad_inputs_are_refused_before_any_kernel():
    pytest.importorskip("triton")
    from bubblelab.engine.fused_gemv import fused_gemv
    from bubblelab.engine.triton_gemm import TileConfig

    gemv, mma = TileConfig(1, 8, 32, 4, 3), TileConfig(16, 16, 32, 4, 3)
    x, w = torch.randn(1, 32), torch.randn(10, 32)
    with pytest.raises(ValueError, match="one row"):
        fused_gemv(torch.randn(2, 32), w, gemv)
    with pytest.raises(ValueError, match="GEMV form"):
        fused_gemv(x, w, mma)
    with pytest.raises(ValueError, match="matching"):
        fused_gemv(x, torch.randn(10, 16), gemv)
    with pytest.raises(ValueError, match="even row count"):
        fused_gemv(x, torch.randn(9, 32), gemv, glu=True)
    with pytest.raises(ValueError, match="only by the norm"):
        fused_gemv(x, w, gemv, residual=torch.randn(1, 32))


def test_fusion_switch_parses_and_scopes(monkeypatch):
    from bubblelab.engine import fusion

    monkeypatch.setenv("BUBBLELAB_FUSE", "norm")
    assert fusion.enabled("norm") and not fusion.enabled("silu")
    with fusion.using("none"):
        assert not any(fusion.enabled(f) for f in fusion.FUSIONS)
        with fusion.using("all"):
            assert all(fusion.enabled(f) for f in fusion.FUSIONS)
    assert fusion.enabled("norm") and not fusion.enabled("silu")
    monkeypatch.setenv("BUBBLELAB_FUSE", "norms")
    with pytest.raises(ValueError, match="unknown fusion 'norms'"):
        fusion.enabled("norm")


def test_unfused_on_cpu_the_layer_is_norm_then_projection():
    """norm_linear off the GEMV path (CPU: no table) is exactly the three modules in a row."""
    from bubblelab.engine.models.layers import RMSNorm, SiluAndMul, norm_linear

    torch.manual_seed(0)
    norm, act = RMSNorm(16, 1e-6), SiluAndMul()
    x, res, w = torch.randn(1, 16), torch.randn(1, 16), torch.randn(12, 16)
    y, added = norm_linear(norm, w, x, res, act)
    normed, ref_added = norm(x, res)
    assert torch.equal(added, ref_added)
    assert torch.equal(y, act(normed @ w.t()))
    y, added = norm_linear(norm, w, x, None)
    assert added is x and torch.equal(y, norm(x) @ w.t())


class Claims:
    """A module that says it is the Triton kind (what the fusions need) but computes eagerly."""

    triton = True

    def __init__(self, module):
        self.module, self.weight, self.eps = module, getattr(module, "weight", None), 1e-6

    def __call__(self, *args):
        return self.module(*args)


@pytest.mark.parametrize("fuse", ["none", "norm", "silu", "all"])
@pytest.mark.parametrize("residual", [True, False])
@pytest.mark.parametrize("act", [True, False])
def test_norm_linear_routes_each_fusion_to_one_gemv_call(monkeypatch, fuse, residual, act):
    """Where the table's GEMV form runs the projection, norm_linear folds the enabled fusions into
    one fused_gemv call (a stand-in computing the eager chain here) and returns what the unfused
    layer returns: the GPU tests cover the kernel, this the routing."""
    from bubblelab.engine import fused_gemv as fused_module
    from bubblelab.engine import fusion
    from bubblelab.engine.models import layers

    calls: list[dict] = []

    def stand_in(x, w, config, *, norm_weight=None, eps=0.0, residual=None, glu=False):
        calls.append(dict(norm=norm_weight is not None, residual=residual is not None, glu=glu))
        y, added = eager(x, residual, norm_weight, w, eps, glu)
        return y, None if residual is None else added

    monkeypatch.setattr(layers, "_gemv_config", lambda x, w: "a GEMV tile")
    monkeypatch.setattr(fused_module, "fused_gemv", stand_in)
    torch.manual_seed(0)
    norm, silu = layers.RMSNorm(16, 1e-6), layers.SiluAndMul()
    x, w = torch.randn(1, 16), torch.randn(24 if act else 12, 16)
    res = torch.randn(1, 16) if residual else None
    with fusion.using("none"):
        ref_y, ref_added = layers.norm_linear(norm, w, x, res, silu if act else None)
    with fusion.using(fuse):
        y, added = layers.norm_linear(Claims(norm), w, x, res, Claims(silu) if act else None)
    folds_norm, folds_act = fuse in ("norm", "all"), fuse in ("silu", "all") and act
    expected = (
        [dict(norm=folds_norm, residual=folds_norm and residual, glu=folds_act)]
        if folds_norm or folds_act
        else []
    )
    assert calls == expected
    torch.testing.assert_close(y, ref_y)
    torch.testing.assert_close(added, ref_added)


# -- GPU (tests/conftest.py skips these without CUDA) ----------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("glu", [False, True])
@torch.inference_mode()
def test_gpu_fused_gemv_matches_the_unfused_kernels(glu):
    """bf16 at qwen3-4b's QKV and gate|up shapes, against the engine's own unfused kernels (the
    Triton add+RMSNorm, the GEMV, SiLU*mul): equal up to fp32 sum order."""
    from bubblelab.engine.fused_gemv import fused_gemv
    from bubblelab.engine.models.triton_fused import rms_norm, silu_and_mul
    from bubblelab.engine.triton_gemm import TileConfig, skinny_matmul

    n = 9728 if glu else 6144
    x, res, nw, w = make_case(2560, n, True, True, glu, torch.bfloat16, "cuda")
    config = TileConfig(1, 8, 256 if glu else 512, 4, 3)
    y, added = fused_gemv(x, w, config, norm_weight=nw, eps=1e-6, residual=res, glu=glu)
    normed, ref_added = rms_norm(x, nw, 1e-6, res)
    ref = skinny_matmul(normed, w, config)
    if glu:
        ref = silu_and_mul(ref)
    assert torch.equal(added, ref_added)
    torch.testing.assert_close(y.float(), ref.float(), atol=1e-2, rtol=1e-2)
    eager_y, _ = eager(x, res, nw, w, 1e-6, glu)
    torch.testing.assert_close(y.float(), eager_y.float(), atol=2e-2, rtol=2e-2)


@pytest.mark.gpu
@torch.inference_mode()
def test_gpu_a_fused_layer_chain_replays_the_same_bits_in_every_pdl_mode():
    """Two layers' MLP halves as the one-row step runs them fused (norm+gate|up+SiLU*mul, down,
    norm+gate|up+SiLU*mul): eager and graph replays, with and without PDL, give the same bits,
    and the new residual is written before the next kernel reads it."""
    from bubblelab.engine import pdl
    from bubblelab.engine.fused_gemv import fused_gemv
    from bubblelab.engine.triton_gemm import TileConfig, skinny_matmul

    if not pdl._supported(0):
        pytest.skip("PDL needs sm90+ and Triton >= 3.5")
    x, res, nw, w_up = make_case(2560, 4096, True, True, True, torch.bfloat16, "cuda")
    w_down = torch.randn(2560, 4096, device="cuda", dtype=torch.bfloat16) / 60
    gate_up, down = TileConfig(1, 8, 256, 4, 3), TileConfig(1, 8, 1024, 8, 3)

    def chain() -> torch.Tensor:
        h, r = fused_gemv(x, w_up, gate_up, norm_weight=nw, eps=1e-6, residual=res, glu=True)
        h, r = fused_gemv(
            skinny_matmul(h, w_down, down),
            w_up,
            gate_up,
            norm_weight=nw,
            eps=1e-6,
            residual=r,
            glu=True,
        )
        assert r is not None  # a residual in, the new one out
        return torch.cat([h, r], dim=-1)

    outputs = outputs_in_every_mode(chain, ("off", "all", "own"))
    assert torch.equal(outputs["off"], outputs["all"]) and torch.equal(
        outputs["off"], outputs["own"]
    )


if __name__ == "__main__":  # the subprocess of cpu_results: TRITON_INTERPRET=1 is set already
    serve_cases(compare)
