"""engine/pdl.py's launch policy, without a GPU: which launches get programmatic dependent launch.
(That PDL changes no result is checked on the GPU: benchmarks/pdl_ab.py compares the logits of
every mode bit for bit; tests/test_triton_compile.py checks each kernel waits when PDL is on.)"""

from __future__ import annotations

import pytest
import torch

from bubblelab.engine import pdl
from tests.pdl_chains import outputs_in_every_mode

CUDA = torch.device("cuda", 0)  # a device object only: nothing runs on it
ON = {"PDL": True, "launch_pdl": True}
OFF = {"PDL": False}


@pytest.fixture
def hopper(monkeypatch):
    """A machine where PDL is supported, and no foreign kernel pending."""
    monkeypatch.setattr(pdl, "_supported", lambda index: True)
    monkeypatch.setattr(pdl, "_after_foreign", False)
    monkeypatch.delenv("BUBBLELAB_PDL", raising=False)


def test_own_mode_skips_only_the_kernel_after_a_foreign_one(hopper):
    assert pdl.mode() == "own"  # the default
    assert pdl.launch_options(CUDA) == ON
    pdl.foreign_kernel()  # a cuBLAS GEMM
    assert pdl.launch_options(CUDA) == OFF  # the kernel right after it waits the plain way
    assert pdl.launch_options(CUDA) == ON  # the next one follows ours again


def test_a_gemms_mma_form_waits_only_when_a_benchmark_asks(hopper):
    assert pdl.launch_options(CUDA, "mma") == ON  # own, the default: early like the rest
    with pdl.using("own-mma"):
        assert pdl.launch_options(CUDA, "mma") == OFF
        assert pdl.launch_options(CUDA) == ON  # the GEMV form and small kernels: still early
    with pdl.using("all"):
        assert pdl.launch_options(CUDA, "mma") == ON
    pdl.foreign_kernel()
    assert pdl.launch_options(CUDA, "mma") == OFF  # never after cuBLAS under own


def test_all_and_off_modes(hopper):
    with pdl.using("all"):
        pdl.foreign_kernel()
        assert pdl.launch_options(CUDA) == ON
    with pdl.using("off"):
        assert pdl.launch_options(CUDA) == OFF
    assert pdl.mode() == "own"  # restored


def test_attention_releases_the_next_kernels_before_it_waits_only_in_one_row_forwards(hopper):
    early = {"PDL": pdl.RELEASE_EARLY, "launch_pdl": True}
    with pdl.step_rows(pdl.EARLY_ROWS):
        for kind in ("attention", "norm", "silu", "gemv"):  # see EARLY_KINDS for why these
            assert pdl.launch_options(CUDA, kind) == early
        for kind in ("qk", "mma"):  # every other kind: wait, then release
            assert pdl.launch_options(CUDA, kind) == ON
        pdl.foreign_kernel()
        assert pdl.launch_options(CUDA, "attention") == OFF  # never after cuBLAS, as under own
        with pdl.using("all"):
            assert pdl.launch_options(CUDA, "attention") == ON  # `all` never releases first
    with pdl.step_rows(pdl.EARLY_ROWS + 1):
        assert pdl.launch_options(CUDA, "attention") == ON
    assert pdl.launch_options(CUDA, "attention") == ON  # outside a forward


def test_which_kinds_release_first_is_chosen_by_env_or_in_process(hopper, monkeypatch):
    early = {"PDL": pdl.RELEASE_EARLY, "launch_pdl": True}
    with pdl.step_rows(1):
        monkeypatch.setenv("BUBBLELAB_PDL_EARLY", "none")
        assert pdl.launch_options(CUDA, "attention") == ON
        monkeypatch.setenv("BUBBLELAB_PDL_EARLY", "norm, silu")
        assert pdl.launch_options(CUDA, "norm") == early
        assert pdl.launch_options(CUDA, "attention") == ON
        with pdl.releasing("all"):
            assert all(pdl.launch_options(CUDA, k) == early for k in pdl.KINDS)
        monkeypatch.setenv("BUBBLELAB_PDL_EARLY", "attention,nrom")
        with pytest.raises(ValueError, match="nrom"):
            pdl.launch_options(CUDA, "attention")
    with pytest.raises(ValueError, match="kind"):
        pdl.launch_options(CUDA, "softmax")


def test_forwards_of_more_than_max_rows_run_without_it_unless_a_benchmark_says(hopper):
    with pdl.step_rows(pdl.MAX_ROWS):
        assert pdl.launch_options(CUDA) == ON
    with pdl.step_rows(pdl.MAX_ROWS + 1):
        assert pdl.launch_options(CUDA) == OFF
        with pdl.using("own"):  # an explicit mode applies at any row count (pdl_ab)
            assert pdl.launch_options(CUDA) == ON
    assert pdl.launch_options(CUDA) == ON  # outside any forward: no cap


@pytest.mark.parametrize(
    "env,mode", [("0", "off"), ("1", "all"), ("own", "own"), ("all", "all"), ("own-mma", "own-mma")]
)
def test_the_environment_chooses(hopper, monkeypatch, env, mode):
    monkeypatch.setenv("BUBBLELAB_PDL", env)
    assert pdl.mode() == mode


def test_a_bad_value_is_refused_in_one_line(hopper, monkeypatch):
    monkeypatch.setenv("BUBBLELAB_PDL", "yes")
    with pytest.raises(ValueError, match="BUBBLELAB_PDL must be 0, 1 or one of"):
        pdl.mode()
    with pytest.raises(ValueError, match="PDL mode must be one of"):
        with pdl.using("sometimes"):
            pass


def test_never_on_the_cpu_or_a_gpu_without_it(monkeypatch):
    monkeypatch.delenv("BUBBLELAB_PDL", raising=False)
    assert pdl.launch_options(torch.device("cpu")) == OFF
    monkeypatch.setattr(pdl, "_supported", lambda index: False)  # before sm90, or old Triton
    assert pdl.launch_options(CUDA) == OFF


@pytest.mark.gpu  # tests/conftest.py skips these without CUDA
@pytest.mark.parametrize("rows", [1, 16])
def test_gpu_a_chain_of_our_kernels_computes_the_same_with_and_without_pdl(rows):
    """add+RMSNorm -> GEMM -> SiLU*mul -> GEMM, captured in a graph per mode and launched eagerly:
    the same bits in every mode (one-row GEMV with its weight prefetch, and the MMA form)."""
    from bubblelab.engine.models.triton_fused import rms_norm, silu_and_mul
    from bubblelab.engine.triton_gemm import TileConfig, skinny_matmul

    if not pdl._supported(0):
        pytest.skip("PDL needs sm90+ and Triton >= 3.5")
    g = torch.Generator(device="cuda").manual_seed(0)
    x, res = torch.randn(2, rows, 2560, device="cuda", generator=g, dtype=torch.bfloat16)
    norm_w = torch.rand(2560, device="cuda", generator=g, dtype=torch.bfloat16) + 0.5
    w_up = torch.randn(2 * 4096, 2560, device="cuda", generator=g, dtype=torch.bfloat16) / 50
    w_down = torch.randn(2560, 4096, device="cuda", generator=g, dtype=torch.bfloat16) / 60
    cfg = TileConfig(1, 8, 512, 4, 3) if rows == 1 else TileConfig(16, 64, 128, 4, 3)

    def chain() -> torch.Tensor:
        h, r = rms_norm(x, norm_w, 1e-6, res)
        return skinny_matmul(silu_and_mul(skinny_matmul(h, w_up, cfg)), w_down, cfg) + r

    outputs = outputs_in_every_mode(chain, ("off", "all", "own", "own-mma"))
    with pdl.step_rows(rows), pdl.releasing("all"):  # every kernel releases first at one row
        outputs["early"] = outputs_in_every_mode(chain, ("own",))["own"]
    for mode in ("all", "own", "early"):
        assert torch.equal(outputs["off"], outputs[mode]), mode
