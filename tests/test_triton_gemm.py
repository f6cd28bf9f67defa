"""The skinny Triton GEMM (engine/triton_gemm.py) against an fp64 product, and engine/linear.py's
choice between it and cuBLAS from a GPU's tuned table.

On CPU the kernel runs under Triton's interpreter in a subprocess (tests/triton_interpreter.py), in
fp32 and fp16 (the interpreter truncates to bf16 where the GPU rounds); the GPU case is bf16 and
includes every config the tuner may pick for a qwen3-4b shape.
"""

from __future__ import annotations

import json

import pytest
import torch

from tests.triton_interpreter import results_by_case, serve_cases

# (rows, N, K, block_m, block_n, block_k, warps, stages, dtype[, split_k])
CPU_CASES = [
    (1, 40, 96, 1, 8, 32, 4, 3, "fp32"),  # GEMV form; N and K not multiples of the tiles
    (1, 64, 128, 1, 16, 64, 4, 3, "fp16"),
    (3, 50, 100, 16, 16, 32, 4, 3, "fp32"),  # tl.dot form, rows padded to 16, uneven K
    (20, 48, 64, 16, 16, 32, 4, 3, "fp16"),  # two row blocks
    (0, 16, 32, 16, 16, 32, 4, 3, "fp32"),  # no rows: nothing to launch
    # split K, the last program of a tile adding the shares: even, uneven and empty last shares
    (1, 40, 256, 1, 16, 32, 4, 3, "fp32", 4),
    (1, 40, 100, 1, 8, 32, 4, 3, "fp32", 3),
    (5, 33, 96, 16, 16, 32, 4, 3, "fp16", 4),
    (17, 48, 200, 16, 32, 64, 4, 3, "fp32", 2),
]
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


@torch.no_grad()
def compare(rows, n, k, bm, bn, bk, warps, stages, dtype, split=1, device="cpu") -> dict:
    """Largest error of the kernel against fp64, relative to the output's largest magnitude, and
    whether `out=` receives the result."""
    from bubblelab.engine.triton_gemm import TileConfig, skinny_matmul

    g = torch.Generator().manual_seed(rows * 1000 + n)
    x = torch.randn(rows, k, generator=g).to(DTYPES[dtype]).to(device)
    w = (torch.randn(n, k, generator=g) * k**-0.5).to(DTYPES[dtype]).to(device)
    want = x.double() @ w.double().t()
    out = torch.full((rows, n), float("nan"), dtype=x.dtype, device=device)
    got = skinny_matmul(x, w, TileConfig(bm, bn, bk, warps, stages, split), out=out)
    scale = max(float(want.abs().max()) if rows else 1.0, 1e-6)
    again = skinny_matmul(x, w, TileConfig(bm, bn, bk, warps, stages, split))
    return {
        "repeatable": bool(torch.equal(got, again)),  # the tile counters were left at zero
        "shape": list(got.shape),
        "into_out": got.data_ptr() == out.data_ptr(),
        "rel_err": float((got.double() - want).abs().max()) / scale if rows else 0.0,
    }


@pytest.fixture(scope="module")
def cpu_results() -> dict:
    return results_by_case(__file__, CPU_CASES)


@pytest.mark.parametrize(
    "case", CPU_CASES, ids=lambda c: "m{}-n{}-k{}-bm{}-{}".format(*c[:4], c[-1])
)
def test_interpreted_kernel_matches_the_product(cpu_results, case):
    r = cpu_results[tuple(case)]
    assert "error" not in r, r.get("error")
    assert r["shape"] == [case[0], case[1]] and r["into_out"] and r["repeatable"]
    # fp32 accumulation: only the output's rounding to the dtype remains
    assert r["rel_err"] <= (1e-5 if case[-1] == "fp32" else 2e-3), r


def test_bad_operands_are_refused():
    from bubblelab.engine.triton_gemm import TileConfig, skinny_matmul

    x, w = torch.zeros(2, 8), torch.zeros(4, 16)
    with pytest.raises(ValueError, match="8 columns"):
        skinny_matmul(x, w, TileConfig(16, 16, 16, 4, 3))
    with pytest.raises(ValueError, match="one row"):
        skinny_matmul(x, torch.zeros(4, 8), TileConfig(1, 16, 16, 4, 3))
    with pytest.raises(ValueError, match="unit stride"):
        skinny_matmul(x, torch.zeros(8, 4).t(), TileConfig(16, 16, 16, 4, 3))


def test_the_table_maps_row_counts_to_the_next_tuned_one(tmp_path):
    from bubblelab.engine.linear import config_for, read_table, table_path

    gemv, tiles = {"block_m": 1, "block_n": 16}, {"block_m": 16, "block_n": 32}
    path = tmp_path / "t.json"
    path.write_text(
        json.dumps(
            {
                "shapes": {
                    "6144x2560": {
                        "16": {"config": None},
                        "1": {"config": gemv},
                        "4": {"config": tiles},
                    }
                }
            }
        )
    )
    entry = read_table(path)[(6144, 2560)]
    assert entry[0] == [1, 4, 16]  # numeric order, not the file's or the strings'
    assert config_for(entry, 1) == gemv
    assert config_for(entry, 2) == tiles and config_for(entry, 4) == tiles
    assert config_for(entry, 9) is None  # tuned at 16: cuBLAS won there
    assert config_for(entry, 17) is None  # past the largest tuned count
    assert table_path("NVIDIA H100 80GB HBM3").name == "nvidia_h100_80gb_hbm3.json"


def test_another_table_can_stand_in_for_this_gpus(tmp_path, monkeypatch):
    """using_table (in-process A/B) and BUBBLELAB_GEMM_TABLE (a whole process) replace the GPU's
    table; a missing file is an error, never a silent fall back to cuBLAS."""
    from bubblelab.engine import linear

    path = tmp_path / "other.json"
    path.write_text(json.dumps({"shapes": {"8x4": {"1": {"config": {"block_m": 1}}}}}))
    linear._default_table.cache_clear()
    monkeypatch.setattr(linear, "table_path", lambda name: tmp_path / "absent.json")
    assert linear._table("GPU") == {}
    with linear.using_table(path):
        assert linear._table("GPU")[(8, 4)][1] == [{"block_m": 1}]
    assert linear._table("GPU") == {}
    with pytest.raises(FileNotFoundError, match="no GEMM table"):
        with linear.using_table(tmp_path / "nope.json"):
            pass
    monkeypatch.setenv("BUBBLELAB_GEMM_TABLE", str(path))
    linear._default_table.cache_clear()
    assert (8, 4) in linear._table("GPU")
    monkeypatch.setenv("BUBBLELAB_GEMM_TABLE", str(tmp_path / "nope.json"))
    linear._default_table.cache_clear()
    with pytest.raises(FileNotFoundError, match="BUBBLELAB_GEMM_TABLE"):
        linear._table("GPU")
    monkeypatch.delenv("BUBBLELAB_GEMM_TABLE")
    linear._default_table.cache_clear()


def test_cpu_tensors_always_take_torch():
    from bubblelab.engine.linear import linear

    x, w = torch.randn(3, 8), torch.randn(5, 8)
    assert torch.equal(linear(x, w), torch.nn.functional.linear(x, w))
    out = torch.empty(3, 5)
    assert linear(x, w, out).data_ptr() == out.data_ptr()
    assert torch.equal(out, x @ w.t())


def test_grown_tile_counters_keep_the_old_set_alive():
    """A graph captured with the smaller set still points at it: growing must not free it."""
    from bubblelab.engine import triton_gemm

    device = torch.device("cpu")
    small = triton_gemm._tile_counters(device, 8)
    grown = triton_gemm._tile_counters(device, small.numel() + 1)
    assert grown.numel() > small.numel() and not grown.any()
    assert any(t is small for t in triton_gemm._counters[device])
    assert triton_gemm._tile_counters(device, 8) is grown


@pytest.mark.gpu  # tests/conftest.py skips these without CUDA
def test_gpu_every_config_of_this_gpus_table_matches_the_product_in_bf16():
    from bubblelab.engine.linear import read_table, table_path

    path = table_path(torch.cuda.get_device_name(0))
    if not path.exists():
        pytest.skip(f"no tuned table for this GPU ({path.name})")
    checked = 0
    for (n, k), (rows, configs) in read_table(path).items():
        for m, config in zip(rows, configs, strict=True):
            if config is not None:
                tiles = tuple(
                    config[f] for f in ("block_m", "block_n", "block_k", "num_warps", "num_stages")
                )
                tiles += (config.get("split_k", 1),)
                r = compare(m, n, k, *tiles[:5], "bf16", tiles[5], device="cuda")
                assert r["rel_err"] <= 1e-2, (n, k, m, config, r)  # bf16 output rounding
                checked += 1
    assert checked, "the table picks Triton nowhere"


if __name__ == "__main__":  # the subprocess of cpu_results: TRITON_INTERPRET=1 is set already
    serve_cases(lambda *case: compare(*case))
