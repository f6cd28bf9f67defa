"""Every Triton kernel of the engine compiles for the H200 (sm_90) on this CPU machine.

The interpreter that runs the kernels' CPU tests accepts code the compiler refuses (a non-constexpr
global, say), and a compile error found on the GPU machine costs device time: Triton compiles to a
cubin for a named target without a GPU, so do that here for each kernel at the engine's shapes.
"""

from __future__ import annotations

import pytest

triton = pytest.importorskip("triton")
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from bubblelab.engine import pdl as pdl_module  # noqa: E402
from bubblelab.engine import triton_gemm  # noqa: E402
from bubblelab.engine.attention import triton_decode, triton_prefill  # noqa: E402
from bubblelab.engine.models import triton_fused  # noqa: E402

H200 = GPUTarget("cuda", 90, 32)


def signature(kernel, pointers: dict[str, str], constexprs: dict) -> dict[str, str]:
    """Argument types by name: pointers as given, strides and counts int32, the scale fp32."""
    sig = {}
    for name in kernel.arg_names:
        if name in constexprs:
            sig[name] = "constexpr"
        elif name in pointers:
            sig[name] = pointers[name]
        else:
            sig[name] = "fp32" if name in ("qk_scale", "eps") else "i32"
    return sig


def compile_for_h200(kernel, pointers: dict[str, str], constexprs: dict, num_warps: int = 4):
    src = ASTSource(
        fn=kernel, signature=signature(kernel, pointers, constexprs), constexprs=constexprs
    )
    return triton.compile(src, target=H200, options={"num_warps": num_warps, "num_stages": 2})


@pytest.mark.parametrize("dtype,precision", [("bf16", "tf32"), ("fp32", "ieee")])
def test_prefill_kernel_compiles(dtype, precision):
    pointers = {n: f"*{dtype}" for n in ("Q", "K", "V", "O")} | {"CU": "*i32"}
    constexprs = dict(
        GROUP=4,
        HEAD_DIM=128,
        BLOCK_M=triton_prefill.BLOCK_M,
        BLOCK_N=triton_prefill.BLOCK_N,
        BLOCK_CU=triton_prefill.BLOCK_CU,
        DOT_PRECISION=precision,
        UPCAST=False,
    )
    assert compile_for_h200(triton_prefill._prefill_kernel, pointers, constexprs).asm["cubin"]


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("pdl", [False, True, 2])
def test_decode_kernels_compile(split, pdl):
    pointers = {n: "*bf16" for n in ("Q", "K", "V", "O")} | {
        "BT": "*i32",
        "CTX": "*i32",
        "PART_O": "*fp32",
        "PART_LSE": "*fp32",
    }
    constexprs = dict(
        GROUP=4,
        BLOCK_G=16,
        HEAD_DIM=128,
        PAGE=16,
        BLOCK_N=triton_decode.BLOCK_N,
        SPLIT=split,
        DOT_PRECISION="tf32",
        UPCAST=False,
        PDL=pdl,
    )
    kernel = compile_for_h200(triton_decode._decode_kernel, pointers, constexprs)
    assert_pdl(kernel, pdl)
    merge = {"PART_O": "*fp32", "PART_LSE": "*fp32", "O": "*bf16"}
    constexprs = dict(HEAD_DIM=128, BLOCK_S=16, PDL=pdl)
    assert_pdl(compile_for_h200(triton_decode._merge_kernel, merge, constexprs, 1), pdl)


def assert_pdl(kernel, pdl: bool | int) -> None:
    """Compiled, and waiting for the kernel before (then releasing the next) exactly when PDL is on:
    a PDL launch of a kernel that never waits would race the kernel before it. PDL 2 releases the
    next kernel first, then waits."""
    ptx = kernel.asm["ptx"]
    assert kernel.asm["cubin"]
    assert ("griddepcontrol.wait" in ptx) == bool(pdl)
    assert ("griddepcontrol.launch_dependents" in ptx) == bool(pdl)
    if pdl:
        release = ptx.index("griddepcontrol.launch_dependents")
        assert (release < ptx.index("griddepcontrol.wait")) == (pdl == pdl_module.RELEASE_EARLY)


@pytest.mark.parametrize("pdl", [False, True])
@pytest.mark.parametrize(
    "block_m,split_k,even_k", [(1, 1, True), (1, 1, False), (16, 1, True), (16, 4, True)]
)
def test_skinny_gemm_compiles(pdl, block_m, split_k, even_k):
    pointers = {"X": "*bf16", "W": "*bf16", "Y": "*bf16", "WS": "*fp32", "LOCKS": "*i32"}
    constexprs = dict(
        BLOCK_M=block_m,
        BLOCK_N=64 if block_m > 1 else 8,
        BLOCK_K=256,
        SPLIT_K=split_k,
        EVEN_K=even_k,
        PDL=pdl,
    )
    assert_pdl(compile_for_h200(triton_gemm._skinny_kernel, pointers, constexprs), pdl)


@pytest.mark.parametrize("pdl", [False, True])
def test_fused_elementwise_kernels_compile(pdl):
    qkv = {n: "*bf16" for n in ("QKV", "QW", "KW", "Q_OUT", "K_OUT", "K_CACHE", "V_CACHE")}
    qkv |= {"POS": "*i64", "COS_SIN": "*fp32", "SLOTS": "*i64"}
    constexprs = dict(
        NUM_HEADS=32, NUM_KV=8, HALF=64, HAS_NORM=True, STORE=True, BLOCK_T=1, PDL=pdl
    )
    assert_pdl(compile_for_h200(triton_fused._qkv_kernel, qkv, constexprs, 1), pdl)
    silu = {"X": "*bf16", "OUT": "*bf16"}
    constexprs = dict(BLOCK=1024, PDL=pdl)
    assert_pdl(compile_for_h200(triton_fused._silu_and_mul_kernel, silu, constexprs), pdl)
    norm = {n: "*bf16" for n in ("X", "RES", "W", "OUT", "RES_OUT")}
    for add in (False, True):
        constexprs = dict(ADD=add, BLOCK=4096, PDL=pdl)
        assert_pdl(compile_for_h200(triton_fused._rms_norm_kernel, norm, constexprs, 8), pdl)
