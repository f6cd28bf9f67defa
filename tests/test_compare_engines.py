"""benchmarks.compare_engines and its parts, run as a user runs them: `python -m benchmarks.<name>`
on the CPU (tiny presets), the outputs read back from --out."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from bubblelab.engine.reference import greedy_reference

ROOT = Path(__file__).resolve().parents[1]


def run_benchmark(module: str, *args: str, env: dict[str, str] | None = None) -> None:
    """`python -m benchmarks.<module> ARGS` from the repository root; fails the test on a non-zero
    exit."""
    proc = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{module}", *args],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def compare_engines(out: Path, *args: str) -> dict:
    run_benchmark(
        "compare_engines", "--device", "cpu", "--presets", "tiny-qwen3", *args, "--out", str(out)
    )
    return json.loads((out / "compare_engines.json").read_text())


def test_hf_generate_is_greedy_and_exact_length(tmp_path, tiny_qwen3):
    """The harness's generate settings decode exactly N tokens per row, the same tokens as our
    greedy oracle (the tiny_qwen3 fixture is seed 2: the same weights)."""
    out = tmp_path / "hf.json"
    args = ["--preset", "tiny-qwen3", "--seed", "2", "--device", "cpu", "--streams", "2"]
    run_benchmark("compare_hf", *args, "--prompt-len", "7", "--new-tokens", "6", "--out", str(out))
    run = json.loads(out.read_text())
    assert [len(row) for row in run["ids"]] == [7 + 6] * 2 and run["seconds"] > 0
    # prefill, then one per decode step
    assert len(run["marks_ms"]) >= 6 and all(m > 0 for m in run["marks_ms"])
    for prompt, row in zip(run["prompts"], run["ids"], strict=True):
        assert row[:7] == prompt
        assert row[7:] == greedy_reference(tiny_qwen3, prompt, 6)


def test_cpu_dry_run_writes_every_output(tmp_path):
    result = compare_engines(tmp_path, "--streams", "1,2", "--repeats", "1", "--L", "8")
    summary = {(r["engine"], r["streams"]): r for r in result["summary"]}
    assert set(summary) == {
        (e, s) for e in ("bubblelab-d1", "bubblelab-d2", "hf-static") for s in (1, 2)
    }
    for (engine, _streams), row in summary.items():
        assert row["decode_tokens_per_s"] > 0 and row["step_ms"] > 0 and row["wall_s"] > 0
        if engine.startswith("bubblelab"):
            assert 0 < row["gpu_busy"] <= 1 and row["forward_ms"] <= row["step_ms"]
    hf_runs = [r for r in result["runs"] if r["engine"] == "hf-static"]
    # min_new_tokens = max_new_tokens
    assert hf_runs and all(r["generated_tokens"] == 8 * r["streams"] for r in hf_runs)
    not_run = {n["engine"]: n["reason"] for n in result["not_run"]}
    assert set(not_run) == {"hf-static-compiled"}  # nano-vllm: benchmarks.compare_nanovllm
    assert not_run["hf-static-compiled"].startswith("not run:")

    markdown = (tmp_path / "compare_engines.md").read_text()
    assert markdown.count("| tiny-qwen3 |") == 6 + 1  # six table rows and the floor row
    assert (tmp_path / "compare_engines.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cpu_dry_run_backends_and_unavailable_backend(tmp_path):
    """--bubblelab-backends: one pair of rows per backend that runs; one that cannot (flash-attn on
    CPU) is a not_run line with its reason, and the run goes on."""
    result = compare_engines(
        tmp_path,
        *("--streams", "1", "--repeats", "1", "--L", "8", "--skip-hf-compile"),
        *("--bubblelab-backends", "torch,flash-attn"),
    )
    engines = {r["engine"]: r for r in result["summary"]}
    assert set(engines) == {"bubblelab-d1", "bubblelab-d2", "hf-static"}
    assert engines["bubblelab-d1"]["attention"] == "torch"
    not_run = {(n["engine"], n["preset"]): n["reason"] for n in result["not_run"]}
    reason = not_run[("bubblelab[flash-attn]", "tiny-qwen3")]
    assert "flash-attn" in reason and "\n" not in reason
    markdown = (tmp_path / "compare_engines.md").read_text()
    assert "| attention |" in markdown and "bubblelab[flash-attn] (tiny-qwen3):" in markdown
    assert (
        "bubblelab-d1_forward_over_floor" in result["floor"]["tiny-qwen3"]
        or result["floor"]["tiny-qwen3"]["floor_ms"] is None
    )


def test_extra_backend_rows_are_suffixed(tmp_path):
    result = compare_engines(
        tmp_path,
        *("--streams", "1", "--repeats", "1", "--L", "6", "--skip-hf-compile"),
        *("--bubblelab-backends", "triton,torch"),
    )
    engines = {r["engine"] for r in result["summary"]}
    assert {"bubblelab-d1[torch]", "bubblelab-d2[torch]"} <= engines
    # triton needs CUDA: not_run
    assert not any(e in engines for e in ("bubblelab-d1", "bubblelab-d2"))
    assert any(n["engine"] == "bubblelab[triton]" for n in result["not_run"])
