"""The six foreign traces from the H200 (traces/foreign/: the original nano-vllm raw and with an
NVTX range per step, PyPI nano-vllm-fork, a JAX decode loop, transformers `generate`, a CuPy decode
loop; index.json says how each was made): what `bubblelab analyze` says about each, pinned
exactly, and every figure computed again by brute force over the raw SQLite rows
(tests/fixture_rows.py, tests/fixture_figures.py: plain Python, none of the SQL).

EXPECTED was written by the analysis (`python -m tests.pin_foreign_fixtures`, then reviewed): per
fixture the step rule and its detail, steps found (decode, prefill-like: which), period CV, GPU
covered and the word for it; the steady steps (count, first, last); their medians (ms), GPU busy
as % of the period, the bubble's share; the idle split; idle gaps (all, kernel gaps) and their
histogram (lower edge us, gaps, kernel gaps); the share of bubble the host ended late; the bubble
per label by the began-in rule and per layer by time (ms a steady step); the host syncs per steady
step (event, API, detail, closes the step, flagged, per step, kernel before, NVTX range) and the
flagged rows of the whole run; what pipelining would buy (%, 95% interval, T_block, T_pipe).
"""

from __future__ import annotations

import math

import pandas as pd
import pytest

from tests.fixture_figures import GAP_NS
from tests.fixture_figures import inventory as brute_inventory
from tests.foreign_fixture_values import NAMES, analysed, brute, brute_rows, per_step_tables

EXPECTED: dict = {
    "nanovllm-raw": {
        "run_id": "512d8e37e2149460",
        "rule": "sync",
        "detail": "the host sync closing each step (64 of 64 sync points on thread 1388, 1 a "
        "step, 1 device-to-host reads a step)",
        "steps": 64,
        "decode_steps": 63,
        "prefill_steps": 1,
        "prefill": [0],
        "period_cv": 0.010562,
        "gpu_coverage": 1.0,
        "confidence": "high",
        "steady": [57, 6, 62],
        "medians": {
            "period": 6.486194,
            "busy": 5.16192,
            "bubble": 1.082354,
            "kernel_gap": 0.239641,
            "forward": 5.400352,
        },
        "busy_pct": 79.771,
        "bubble_share": 0.16537,
        "idle_split": {
            "idle_ms_per_step": 1.313049,
            "kernel_gaps_ms_per_step": 0.239665,
            "longest_bubble_ms_per_step": 0.445236,
            "other_bubbles_ms_per_step": 0.628148,
            "kernel_gaps_share": 0.182526,
            "longest_bubble_share": 0.339086,
            "other_bubbles_share": 0.478389,
        },
        "gaps": [30152, 29327],
        "histogram": [
            [0, 29256, 29256],
            [2, 71, 71],
            [5, 30, 0],
            [10, 265, 0],
            [20, 348, 0],
            [50, 68, 0],
            [200, 114, 0],
        ],
        "host_late_share": 0.996951,
        "began_in": {
            "untraced host code": 0.722276,
            "cuda: memcpy DtoH": 0.275602,
            "cuda: cudaStreamIsCapturing": 0.069345,
            "cuda: cudaEventRecordWithFlags": 0.004824,
            "cuda: memcpy HtoD": 0.001337,
        },
        "by_time": {"CUDA API": 0.555067, "untraced host code": 0.518299, "OS runtime": 1.8e-05},
        "syncs_per_step": [
            [
                "copy",
                "cudaMemcpyAsync_v3020",
                "DtoH pageable 1024 B",
                True,
                False,
                1.0,
                "triton_red_fused__softmax__to_copy_argmax_clamp_min_div_exponential_ge_mul_neg_scalar_tensor_sub_unsqueeze_where_4",
                "outside any phase",
            ],
            [
                "sync",
                "cudaStreamSynchronize_v3020",
                "blocking call",
                True,
                False,
                1.0,
                "triton_red_fused__softmax__to_copy_argmax_clamp_min_div_exponential_ge_mul_neg_scalar_tensor_sub_unsqueeze_where_4",
                "outside any phase",
            ],
        ],
        "flagged_syncs": 0,
        "pipelining": {
            "speedup_pct": 18.23,
            "interval_pct": [17.897, 20.362],
            "t_block_ms": 6.486194,
            "t_pipe_ms": 5.400352,
        },
    },
    "nanovllm-nvtx": {
        "run_id": "ae5b54a46768a1e1",
        "rule": "nvtx",
        "detail": "^LLMEngine\\.step$",
        "steps": 64,
        "decode_steps": 63,
        "prefill_steps": 1,
        "prefill": [0],
        "period_cv": 0.024415,
        "gpu_coverage": 1.0,
        "confidence": "high",
        "steady": [57, 6, 62],
        "medians": {
            "period": 6.544722,
            "busy": 5.165763,
            "bubble": 1.125555,
            "kernel_gap": 0.238911,
            "forward": 5.405152,
        },
        "busy_pct": 79.031,
        "bubble_share": 0.173221,
        "idle_split": {
            "idle_ms_per_step": 1.37618,
            "kernel_gaps_ms_per_step": 0.239341,
            "longest_bubble_ms_per_step": 0.462851,
            "other_bubbles_ms_per_step": 0.673988,
            "kernel_gaps_share": 0.173917,
            "longest_bubble_share": 0.33633,
            "other_bubbles_share": 0.489753,
        },
        "gaps": [30150, 29321],
        "histogram": [
            [0, 29257, 29257],
            [2, 64, 64],
            [5, 31, 0],
            [10, 265, 0],
            [20, 341, 0],
            [50, 78, 0],
            [200, 112, 0],
            [500, 1, 0],
            [1000, 1, 0],
        ],
        "host_late_share": 0.996754,
        "began_in": {
            "nvtx: LLMEngine.step": 0.816779,
            "cuda: memcpy DtoH": 0.318957,
            "cuda: memcpy DtoD": 0.000664,
            "cuda: kernel launch": 0.00044,
        },
        "by_time": {
            "CUDA API": 0.560389,
            "NVTX range (untraced code in it)": 0.544819,
            "untraced host code": 0.031441,
            "OS runtime": 0.00019,
        },
        "syncs_per_step": [
            [
                "copy",
                "cudaMemcpyAsync_v3020",
                "DtoH pageable 1024 B",
                True,
                False,
                1.0,
                "triton_red_fused__softmax__to_copy_argmax_clamp_min_div_exponential_ge_mul_neg_scalar_tensor_sub_unsqueeze_where_4",
                "LLMEngine.step",
            ],
            [
                "sync",
                "cudaStreamSynchronize_v3020",
                "blocking call",
                True,
                False,
                1.0,
                "triton_red_fused__softmax__to_copy_argmax_clamp_min_div_exponential_ge_mul_neg_scalar_tensor_sub_unsqueeze_where_4",
                "LLMEngine.step",
            ],
        ],
        "flagged_syncs": 0,
        "pipelining": {
            "speedup_pct": 19.191,
            "interval_pct": [18.96, 21.409],
            "t_block_ms": 6.544722,
            "t_pipe_ms": 5.405152,
        },
    },
    "nano-vllm-fork": {
        "run_id": "2f3f3d8de25792f9",
        "rule": "sync",
        "detail": "the host sync closing each step (64 of 128 sync points on thread 2113, 2 a "
        "step, 129 device-to-host reads a step)",
        "steps": 64,
        "decode_steps": 63,
        "prefill_steps": 1,
        "prefill": [0],
        "period_cv": 0.047801,
        "gpu_coverage": 1.0,
        "confidence": "high",
        "steady": [57, 6, 62],
        "medians": {
            "period": 10.367104,
            "busy": 2.779679,
            "bubble": 7.408356,
            "kernel_gap": 0.195231,
            "forward": 2.973596,
        },
        "busy_pct": 26.592,
        "bubble_share": 0.715411,
        "idle_split": {
            "idle_ms_per_step": 7.676255,
            "kernel_gaps_ms_per_step": 0.195274,
            "longest_bubble_ms_per_step": 2.61296,
            "other_bubbles_ms_per_step": 4.86802,
            "kernel_gaps_share": 0.025439,
            "longest_bubble_share": 0.340395,
            "other_bubbles_share": 0.634166,
        },
        "gaps": [31293, 22815],
        "histogram": [
            [0, 22749, 22749],
            [2, 66, 66],
            [5, 125, 0],
            [10, 7587, 0],
            [20, 466, 0],
            [50, 71, 0],
            [100, 58, 0],
            [200, 56, 0],
            [500, 1, 0],
            [1000, 114, 0],
        ],
        "host_late_share": 0.999182,
        "began_in": {
            "untraced host code": 3.384297,
            "cuda: memcpy DtoH": 2.280603,
            "cuda: synchronize": 1.810881,
            "os: pthread_cond_signal": 0.002593,
            "cuda: kernel launch": 0.001365,
            "cuda: cudaStreamIsCapturing": 0.00124,
        },
        "by_time": {"untraced host code": 6.139366, "CUDA API": 1.335477, "OS runtime": 0.006137},
        "syncs_per_step": [
            [
                "copy",
                "cudaMemcpyAsync_v3020",
                "DtoH pageable 1024 B",
                True,
                False,
                1.0,
                "triton_red_fused__softmax__to_copy_argmax_clamp_min_div_exponential_ge_mul_neg_scalar_tensor_sub_unsqueeze_where_4",
                "outside any phase",
            ],
            [
                "copy",
                "cudaMemcpyAsync_v3020",
                "DtoH pinned 4 B",
                False,
                True,
                128.0,
                "nvjet_sm90_tst_192x128_64x5_2x1_v_bz_coopB_TNT",
                "outside any phase",
            ],
            [
                "sync",
                "cudaStreamSynchronize_v3020",
                "blocking call",
                False,
                True,
                128.0,
                "nvjet_sm90_tst_192x128_64x5_2x1_v_bz_coopB_TNT",
                "outside any phase",
            ],
            [
                "sync",
                "cudaStreamSynchronize_v3020",
                "blocking call",
                True,
                False,
                1.0,
                "triton_red_fused__softmax__to_copy_argmax_clamp_min_div_exponential_ge_mul_neg_scalar_tensor_sub_unsqueeze_where_4",
                "outside any phase",
            ],
        ],
        "flagged_syncs": 16384,
        "pipelining": {
            "speedup_pct": 72.873,
            "interval_pct": [70.601, 76.797],
            "t_block_ms": 10.367104,
            "t_pipe_ms": 5.903244,
        },
    },
    "jax-decode": {
        "run_id": "9ed8b5c5e415fe43",
        "rule": "graph",
        "detail": "one CUDA-graph replay a step (150 replays of graphs with >= 62 nodes)",
        "steps": 149,
        "decode_steps": 149,
        "prefill_steps": 0,
        "prefill": [],
        "period_cv": 0.111903,
        "gpu_coverage": 0.993443,
        "confidence": "high",
        "steady": [143, 5, 147],
        "medians": {
            "period": 5.316381,
            "busy": 0.309819,
            "bubble": 5.004672,
            "kernel_gap": 0.002368,
            "forward": 0.312156,
        },
        "busy_pct": 5.757,
        "bubble_share": 0.942,
        "idle_split": {
            "idle_ms_per_step": 5.157893,
            "kernel_gaps_ms_per_step": 0.002353,
            "longest_bubble_ms_per_step": 3.601174,
            "other_bubbles_ms_per_step": 1.554366,
            "kernel_gaps_share": 0.000456,
            "longest_bubble_share": 0.698187,
            "other_bubbles_share": 0.301357,
        },
        "gaps": [861, 146],
        "histogram": [
            [0, 7, 7],
            [2, 139, 139],
            [50, 85, 0],
            [100, 108, 0],
            [200, 166, 0],
            [500, 205, 0],
            [1000, 151, 0],
        ],
        "host_late_share": 1.0,
        "began_in": {
            "os: futex": 4.892465,
            "untraced host code": 0.201834,
            "nvtx: XlaModule:#prefix=args[0],hlo_module=jit_stage,program_id=15950#": 0.055795,
            "cuda: cuCtxSetCurrent": 0.0041,
            "nvtx: Thunk:#hlo_op=copy.1,unique_hlo_op_id=4294967297#": 0.001346,
        },
        "by_time": {
            "untraced host code": 2.981139,
            "OS runtime": 1.517118,
            "CUDA API": 0.390802,
            "NVTX range (untraced code in it)": 0.266481,
        },
        "syncs_per_step": [
            [
                "copy",
                "cuMemcpyDtoHAsync_v2",
                "DtoH pinned 1024000 B",
                False,
                False,
                1.0,
                "loop_gather_fusion",
                "outside any phase",
            ]
        ],
        "flagged_syncs": 0,
        "pipelining": {
            "speedup_pct": -0.5,
            "interval_pct": [-0.5, 0.0],
            "t_block_ms": 5.316381,
            "t_pipe_ms": 5.316381,
        },
    },
    "hf-generate": {
        "run_id": "42bba902088bbbb9",
        "rule": "sync",
        "detail": "the host sync closing each step (20 of 50 sync points on thread 4028, 2.5 "
        "a step, 1 device-to-host reads a step; 30 read nothing back and close no "
        "step)",
        "steps": 20,
        "decode_steps": 20,
        "prefill_steps": 0,
        "prefill": [],
        "period_cv": 0.07389,
        "gpu_coverage": 1.0,
        "confidence": "high",
        "steady": [9, 10, 18],
        "medians": {
            "period": 32.555331,
            "busy": 4.148851,
            "bubble": 28.390231,
            "kernel_gap": 0.04256,
            "forward": 4.188527,
        },
        "busy_pct": 12.488,
        "bubble_share": 0.873639,
        "idle_split": {
            "idle_ms_per_step": 29.067688,
            "kernel_gaps_ms_per_step": 0.049291,
            "longest_bubble_ms_per_step": 0.176705,
            "other_bubbles_ms_per_step": 28.841691,
            "kernel_gaps_share": 0.001696,
            "longest_bubble_share": 0.006079,
            "other_bubbles_share": 0.992225,
        },
        "gaps": [17117, 295],
        "histogram": [
            [0, 232, 232],
            [2, 63, 63],
            [5, 4889, 0],
            [10, 8515, 0],
            [20, 3239, 0],
            [50, 144, 0],
            [100, 33, 0],
            [200, 2, 0],
        ],
        "host_late_share": 0.997778,
        "began_in": {
            "untraced host code": 28.756363,
            "cuda: kernel launch": 0.153872,
            "cuda: synchronize": 0.043242,
            "os: pthread_cond_signal": 0.030368,
            "cuda: memcpy DtoD": 0.027338,
            "cuda: cuKernelGetName": 0.007214,
        },
        "by_time": {"untraced host code": 20.320654, "CUDA API": 8.688683, "OS runtime": 0.00906},
        "syncs_per_step": [
            [
                "copy",
                "cudaMemcpyAsync_v3020",
                "DtoH pinned 1 B",
                True,
                False,
                1.0,
                "vectorized_elementwise_kernel",
                "outside any phase",
            ],
            [
                "sync",
                "cudaStreamSynchronize_v3020",
                "blocking call",
                True,
                False,
                1.0,
                "vectorized_elementwise_kernel",
                "outside any phase",
            ],
        ],
        "flagged_syncs": 60,
        "pipelining": {
            "speedup_pct": -1.512,
            "interval_pct": [-1.514, 0.054],
            "t_block_ms": 32.555331,
            "t_pipe_ms": 32.538619,
        },
    },
    "cupy-decode": {
        "run_id": "d8a1805472ccac0e",
        "rule": "sync",
        "detail": "the host sync closing each step (200 of 200 sync points on thread 4321, 1 "
        "a step, 1 device-to-host reads a step)",
        "steps": 200,
        "decode_steps": 200,
        "prefill_steps": 0,
        "prefill": [],
        "period_cv": 0.114685,
        "gpu_coverage": 1.0,
        "confidence": "high",
        "steady": [194, 5, 198],
        "medians": {
            "period": 3.988845,
            "busy": 0.372362,
            "bubble": 3.572897,
            "kernel_gap": 0.042463,
            "forward": 0.414971,
        },
        "busy_pct": 9.061,
        "bubble_share": 0.899204,
        "idle_split": {
            "idle_ms_per_step": 3.736914,
            "kernel_gaps_ms_per_step": 0.041844,
            "longest_bubble_ms_per_step": 3.112451,
            "other_bubbles_ms_per_step": 0.582618,
            "kernel_gaps_share": 0.011198,
            "longest_bubble_share": 0.832893,
            "other_bubbles_share": 0.155909,
        },
        "gaps": [10476, 4350],
        "histogram": [
            [0, 3174, 3174],
            [2, 1176, 1176],
            [5, 1740, 0],
            [10, 2790, 0],
            [20, 1018, 0],
            [50, 322, 0],
            [100, 62, 0],
            [1000, 194, 0],
        ],
        "host_late_share": 0.990866,
        "began_in": {
            "cuda: memcpy DtoH": 3.115798,
            "untraced host code": 0.543024,
            "cuda: kernel launch": 0.032093,
            "cuda: memcpy HtoD": 0.002309,
            "cuda: cudaEventRecord": 0.001606,
            "os: pthread_cond_signal": 0.000194,
            "cuda: cuKernelGetName": 4.5e-05,
        },
        "by_time": {"untraced host code": 3.406063, "CUDA API": 0.280014, "OS runtime": 0.008993},
        "syncs_per_step": [
            [
                "copy",
                "cudaMemcpyAsync_v3020",
                "DtoH pageable 1024000 B",
                True,
                False,
                1.0,
                "sgemm_largek_lds64",
                "outside any phase",
            ],
            [
                "sync",
                "cudaStreamSynchronize_v3020",
                "blocking call",
                True,
                False,
                1.0,
                "sgemm_largek_lds64",
                "outside any phase",
            ],
        ],
        "flagged_syncs": 0,
        "pipelining": {
            "speedup_pct": 4.008,
            "interval_pct": [3.797, 4.715],
            "t_block_ms": 3.988845,
            "t_pipe_ms": 3.815956,
        },
    },
}


@pytest.mark.parametrize("name", NAMES)
def test_analysis_of_each_fixture_is_pinned(name):
    assert analysed(name) == EXPECTED[name]


@pytest.mark.parametrize("name", NAMES)
def test_every_figure_matches_brute_force(name):
    """The summary figures, all of them, from the raw rows (floats at the pins' rounding)."""
    want = {k: v for k, v in EXPECTED[name].items() if k not in ("run_id", "detail")}
    assert set(brute(name)) == set(want)
    for key, value in brute(name).items():
        assert _close(value, want[key]), key


@pytest.mark.parametrize("name", NAMES)
def test_every_step_matches_brute_force(name):
    """Per step, to the nanosecond: GPU span, kind, period, busy, kernel gaps, bubble, host wait;
    every idle gap of every timed step; every host sync with its step, closing and flagged."""
    steps, gaps, inventory = per_step_tables(name)
    rows, _, windows, want = brute_rows(name)
    assert len(steps) == len(want) == len(windows)
    for row, w in zip(steps.itertuples(), want, strict=True):
        assert (row.step, row.kind, row.gpu_start_ns, row.gpu_end_ns) == (
            w.step, w.kind, w.gpu_start, w.gpu_end,
        )  # fmt: skip
        assert round(row.wait_ms * 1e6) == w.wait
        if not w.timed:
            assert math.isnan(row.period_ms)
            continue
        got = [
            round(x * 1e6) for x in (row.period_ms, row.busy_ms, row.kernel_gap_ms, row.bubble_ms)
        ]
        assert got == [w.period, w.busy, w.kernel_gap, w.bubble]
        assert w.busy + w.kernel_gap + w.bubble == w.period
    assert list(zip(gaps.start_ns, gaps.end_ns, strict=True)) == [g for w in want for g in w.gaps]
    assert ((gaps.end_ns - gaps.start_ns < GAP_NS) == gaps.within.notna()).all()
    rows_ = sorted(brute_inventory(rows, windows), key=lambda r: (r["start"], r["event"]))
    got = list(
        zip(
            inventory.event,
            inventory.api,
            inventory.start_ns,
            inventory.closing,
            inventory.flagged,
            strict=True,
        )
    )
    assert got == [(r["event"], r["api"], r["start"], r["closing"], r["flagged"]) for r in rows_]
    assert [None if pd.isna(s) else int(s) for s in inventory.step] == [r["step"] for r in rows_]
    assert [None if pd.isna(b) else int(b) for b in inventory.bytes] == [r["bytes"] for r in rows_]


def _close(got, want) -> bool:
    """Equal, floats within 2 units of the 6th decimal (sums taken in another order)."""
    if isinstance(want, dict):
        return set(got) == set(want) and all(_close(got[k], want[k]) for k in want)
    if isinstance(want, list):
        return len(got) == len(want) and all(_close(g, w) for g, w in zip(got, want, strict=True))
    if isinstance(want, float) and not isinstance(got, bool):
        return math.isclose(got, want, rel_tol=0, abs_tol=2e-6)
    return got == want
