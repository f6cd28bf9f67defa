"""Whose noise an unknown speedup's is (costmodel.spread): the host's speed or the GPU's work,
read from each run's median steady step by phase, on per-step tables with a known answer."""

import zlib

import numpy as np
import pandas as pd
import pytest

from bubblelab.costmodel.spread import run_medians, source_lines, spread

GPU_MS, HOST_MS = 1.0, 0.3  # a step's forward and its host work (plan + launch + finalize)


def steps(run_id: str, depth: int, host: float, gpu: float = 1.0, n: int = 60) -> pd.DataFrame:
    """One run: n decode steps at batch 8. Depth 1 waits for its host (period = forward + host),
    depth 2 hides it (period = forward). host / gpu: this run's speed factors."""
    rng = np.random.default_rng(zlib.crc32(run_id.encode()))
    jitter = rng.normal(1, 0.002, n)
    forward = GPU_MS * gpu * jitter
    plan, launch, finalize = (HOST_MS * host * share * jitter for share in (0.1, 0.6, 0.3))
    period = forward + (plan + launch + finalize if depth == 1 else 0.0)
    return pd.DataFrame({
        "run_id": run_id, "step": np.arange(n), "kind": "decode", "batch_size": 8, "depth": depth,
        "period_ms": period, "busy_ms": forward, "forward_ms": forward, "plan_ms": plan,
        "launch_ms": launch, "finalize_ms": finalize,
    })  # fmt: skip


def configuration(host: list[float], gpu: list[float] | None = None) -> pd.DataFrame:
    gpu = gpu or [1.0] * len(host)
    runs = enumerate(zip(host, gpu, strict=True))
    return pd.concat([steps(f"r{i}-d{d}", d, h, g) for i, (h, g) in runs for d in (1, 2)])


def row(n: int, known: bool = False) -> dict:
    return {"label": "m · GPU · 8 streams", "observed_known": known, "pairs": n,
            "runs_block": ",".join(f"r{i}-d1" for i in range(n)),
            "runs_pipe": ",".join(f"r{i}-d2" for i in range(n))}  # fmt: skip


HOSTS = [1.0, 2.5, 1.2, 0.9, 2.0, 1.1]  # the host's speed regime of each run


def test_a_host_whose_speed_changes_shows_at_depth_1_only():
    table = configuration(HOSTS)
    m = run_medians(table, [f"r{i}-d1" for i in range(6)])
    # every host phase of a run slower by its one factor: the host factor recovers it
    expect = np.array(HOSTS) / np.median(HOSTS)
    assert m["host_factor"].to_numpy() == pytest.approx(expect, rel=0.01)
    s = spread(table, row(6)["runs_block"].split(","), row(6)["runs_pipe"].split(","))
    periods = [GPU_MS + HOST_MS * h for h in HOSTS]
    cv = 100 * np.std(periods, ddof=1) / np.mean(periods)
    assert s["step_cv_d1_pct"] == pytest.approx(cv, rel=0.02)
    assert s["step_cv_d2_pct"] < 0.2 and s["forward_cv_d1_pct"] < 0.2
    assert s["d1_step_host_r"] > 0.99
    assert s["launch_ms_d1"] == pytest.approx((0.18 * 0.9, 0.18 * 2.5), rel=0.02)
    [line] = source_lines(pd.DataFrame([row(6)]), table)
    said = f"varies {cv:.1f}% over the repeats at depth 1, {s['step_cv_d2_pct']:.1f}% at depth 2"
    assert said in line
    assert "this host's speed changes from run to run" in line and "0.162-0.450 ms" in line


def test_a_gpu_whose_work_changes_is_not_blamed_on_the_host():
    gpu = [1.0, 1.08, 0.95, 1.03, 0.97, 1.1]  # clocks, say: the forward moves, the host holds
    table = configuration([1.0] * 6, gpu)
    [line] = source_lines(pd.DataFrame([row(6)]), table)
    assert "host" not in line and "at depth 2" in line


def test_known_speedups_and_too_few_pairs_say_nothing():
    table = configuration(HOSTS)
    assert source_lines(pd.DataFrame([row(6, known=True), row(2)]), table) == []
