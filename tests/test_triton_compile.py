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

from bubblelab.engine.attention import triton_decode, triton_prefill  # noqa: E402

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
            sig[name] = "fp32" if name == "qk_scale" else "i32"
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
def test_decode_kernels_compile(split):
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
    )
    assert compile_for_h200(triton_decode._decode_kernel, pointers, constexprs).asm["cubin"]
    merge = {"PART_O": "*fp32", "PART_LSE": "*fp32", "O": "*bf16"}
    kernel = compile_for_h200(triton_decode._merge_kernel, merge, dict(HEAD_DIM=128, BLOCK_S=16), 1)
    assert kernel.asm["cubin"]
