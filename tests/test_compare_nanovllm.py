"""The roofline floor (costmodel.roofline) and benchmarks.compare_nanovllm run as a user runs it,
`python -m benchmarks.compare_nanovllm` on the CPU: the dry run (bubblelab only, nano-vllm "not
run"), and the whole harness against a stand-in nanovllm package laid out as the original."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from bubblelab.costmodel.roofline import (
    Floor,
    decode_weight_bytes,
    min_decode_steps,
    prefill_flops,
    run_floor,
)
from bubblelab.engine.attention import AttentionMetadata
from bubblelab.engine.attention.torch_backend import TorchAttention
from bubblelab.engine.config import PRESETS
from bubblelab.engine.models.transformer import TransformerLM

ROOT = Path(__file__).resolve().parents[1]
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                "NVSHMEM_DISABLE_NVLS": "1"}  # fmt: skip


# -- the floor's arithmetic ------------------------------------------------------------------------
@pytest.mark.parametrize("preset", ["tiny-qwen3", "tiny-llama", "qwen3-4b", "qwen3-8b"])
def test_decode_weight_bytes_are_the_parameters_a_step_reads(preset):
    """Every parameter, the embedding table once (tied: it is the LM head) or not at all (untied:
    a step gathers only its rows)."""
    cfg = PRESETS[preset]
    with torch.device("meta"):
        model = TransformerLM(cfg, TorchAttention())
    params = sum(p.numel() for p in model.parameters())
    embedding = 0 if cfg.tie_word_embeddings else cfg.vocab_size * cfg.hidden_size
    assert decode_weight_bytes(cfg, 2) == 2 * (params - embedding)
    if preset == "qwen3-4b":  # the write-up's N = 4.02B parameters
        assert round(decode_weight_bytes(cfg, 2) / 2 / 1e9, 2) == 4.02


@torch.inference_mode()
def test_prefill_flops_match_torchs_count_of_a_real_prefill(tiny_qwen3):
    """torch's FlopCounterMode on a real prefill: its matmuls (projections, MLP, the LM head on the
    last tokens) plus causal attention (half the square the dense attention matmul computes)."""
    cfg, lens = tiny_qwen3.config, [5, 9, 1]
    ids = torch.randint(100, 400, (sum(lens),))
    positions = torch.cat([torch.arange(n) for n in lens])
    last = torch.tensor(lens).cumsum(0) - 1
    with FlopCounterMode(display=False) as counter:
        hidden = tiny_qwen3.model(ids, positions, AttentionMetadata.for_prompts(lens))
        tiny_qwen3.model.compute_logits(hidden[last])
    counts = {str(op): n for op, n in counter.get_flop_counts()["Global"].items()}
    causal = 4 * cfg.num_layers * cfg.num_heads * cfg.head_dim * sum(n * (n + 1) // 2 for n in lens)
    assert prefill_flops(cfg, lens) == counts["aten.mm"] + causal


def test_min_decode_steps_and_the_floor():
    assert min_decode_steps([64] * 128, 128) == 63  # (a): everything at once
    assert min_decode_steps([5, 5], 1) == 8  # one at a time
    assert min_decode_steps([10, 2, 2], 2) == 9  # the longest request bounds it
    assert min_decode_steps([4, 4, 4, 4], 2) == 6  # ceil(12 / 2)
    assert min_decode_steps([], 4) == 0
    f = Floor(prefill_flops=8e12, decode_steps=10, weight_bytes=4e9, matmul_peak=4e14,
              copy_bandwidth=2e12, gpus=2)  # fmt: skip
    assert f.prefill_s == pytest.approx(0.01) and f.decode_s == pytest.approx(0.01)
    assert f.seconds == pytest.approx(0.02)
    cfg = PRESETS["qwen3-4b"]
    one, two = (run_floor(cfg, 2, [50] * 4, [64] * 4, 4, 1e15, 4e12, n) for n in (1, 2))
    assert two.seconds == pytest.approx(one.seconds / 2)
    assert one.decode_steps == 63 and one.weight_bytes == decode_weight_bytes(cfg, 2)


# -- the harness, run as a user runs it ------------------------------------------------------------
def run_harness(out: Path, *args: str, env: dict | None = None, check: bool = True) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.compare_nanovllm", "--device", "cpu"]
        + ["--preset", "tiny-qwen3", "--L", "6", "--out", str(out), *args],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=600,
    )
    if not check:
        return {"rc": proc.returncode, "stderr": proc.stderr}
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads((out / "compare_nanovllm.json").read_text())


def check_floors(result: dict) -> None:
    """Every row's floor recomputed from the recorded inputs, and its distance to it."""
    roof = result["roofline"]
    for run in result["runs"]:
        f = result["floors"][run["case"]][str(run["gpus"])]
        expected = f["prefill_flops"] / (f["gpus"] * roof["matmul_peak"]) + f["decode_steps"] * f[
            "weight_bytes"
        ] / (f["gpus"] * roof["copy_bandwidth"])
        assert run["floor_s"] == pytest.approx(expected)
        assert run["over_floor"] == pytest.approx(run["wall_s"] / expected)
        if run["engine"].startswith("bubblelab"):  # a floor no real run beats (the stand-in does)
            assert run["over_floor"] > 1


def test_cpu_dry_run(tmp_path):
    """bubblelab only (nano-vllm needs CUDA: one "not run" line), both parts, every output."""
    result = run_harness(tmp_path, "--streams", "1,2", "--repeats", "2")
    not_run = {n["engine"]: n["reason"] for n in result["not_run"]}
    assert set(not_run) == {"nano-vllm"} and not_run["nano-vllm"].startswith("not run: ")
    assert "CUDA" in not_run["nano-vllm"] or "no nano-vllm source" in not_run["nano-vllm"]
    # the FA2-API shim is where the harness looks for it (a move must take the harness along)
    assert (Path(result["nanovllm"]["shim"]) / "flash_attn" / "__init__.py").is_file()
    order = [(r["case"], r["repeat"], r["engine"]) for r in result["runs"]]
    engines = ["bubblelab-d1", "bubblelab-d2"]
    assert order == [("writeup", r, e) for r in (-1, 0, 1) for e in engines] + [
        (f"decode-{s}", r, e) for r in (-1, 0, 1) for s in (1, 2) for e in engines
    ]
    a = result["cases"]["writeup"]
    assert (a["requests"], a["output_tokens"], a["temperature"]) == (128, 128 * 64, 0.6)
    assert 20 <= a["prompt_len_min"] and a["prompt_len_max"] <= 80
    assert result["cases"]["decode-2"]["requests"] == 4
    for run in result["runs"]:
        assert run["generated_tokens"] == result["cases"][run["case"]]["output_tokens"]
    check_floors(result)
    summary = {(r["case"], r["engine"]): r for r in result["summary"]}
    assert set(summary) == {(c, e) for c in ("writeup", "decode-1", "decode-2") for e in engines}
    assert all(r["repeats"] == 2 and "vs_nanovllm" not in r for r in summary.values())
    assert result["floors"]["writeup"]["1"]["decode_steps"] == 63
    markdown = (tmp_path / "compare_nanovllm.md").read_text()
    assert "## (a) The write-up's workload: 128 prompts of" in markdown
    assert "- nano-vllm (tiny-qwen3): not run: " in markdown
    assert (tmp_path / "compare_nanovllm.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_argument_errors_and_quick(tmp_path):
    bad = run_harness(tmp_path, "--parts", "c", check=False)
    assert bad["rc"] == 2 and "need --repeats >= 1, a part" in bad["stderr"]
    quick = run_harness(tmp_path, "--quick", "--parts", "b", "--streams", "1", "--skip-nanovllm")
    assert (quick["args"]["repeats"], quick["args"]["requests_per_stream"]) == (3, 1)
    assert quick["not_run"][0]["reason"] == "not run: skipped (--skip-nanovllm)"
    assert [r["repeat"] for r in quick["runs"][::2]] == [-1, 0, 1, 2]


# -- against a stand-in nano-vllm ------------------------------------------------------------------
# The original's layout and entry points (nanovllm/engine/llm_engine.py imports AutoTokenizer and
# calls it on the model directory, which has no tokenizer files), a scheduler reduced to "prefill
# everything waiting, else decode everything running", and knobs to fail or hang.
STANDIN = {
    "nanovllm/__init__.py": """
from nanovllm.llm import LLM
from nanovllm.sampling_params import SamplingParams
""",
    "nanovllm/llm.py": """
from nanovllm.engine.llm_engine import LLMEngine


class LLM(LLMEngine):
    pass
""",
    "nanovllm/sampling_params.py": """
from dataclasses import dataclass


@dataclass(slots=True)
class SamplingParams:
    temperature: float = 1.0
    max_tokens: int = 64
    ignore_eos: bool = False

    def __post_init__(self):
        assert self.temperature > 1e-10, "greedy sampling is not permitted"
""",
    "nanovllm/engine/llm_engine.py": """
import json
import os
import time

from transformers import AutoTokenizer


class LLMEngine:
    def __init__(self, model, **kwargs):
        assert os.path.isfile(os.path.join(model, "config.json"))
        assert os.path.isfile(os.path.join(model, "model.safetensors"))
        for name, value in json.loads(os.environ["EXPECT_ENV"]).items():
            assert os.environ.get(name) == value, name
        assert str(kwargs["tensor_parallel_size"]) in os.environ["EXPECT_TP"].split(",")
        assert not kwargs["enforce_eager"] and 0 < kwargs["gpu_memory_utilization"] < 1
        if os.environ.get("STANDIN_FAIL") == "init":
            raise RuntimeError("stand-in failure\\nsecond line")
        self.tokenizer = AutoTokenizer.from_pretrained(model, use_fast=True)
        assert self.tokenizer.eos_token_id == 2 and self.tokenizer.decode([5]) == ""
        with open(os.environ["STANDIN_PID_FILE"], "a") as f:
            f.write(f"{os.getpid()}\\n")
        self.waiting, self.running, self.next_id, self.steps = [], [], 0, 0

    def add_request(self, prompt, sampling_params):
        assert isinstance(prompt, list) and sampling_params.ignore_eos
        self.waiting.append([self.next_id, sampling_params.max_tokens, []])
        self.next_id += 1

    def step(self):
        self.steps += 1
        if os.environ.get("STANDIN_FAIL") == "hang" and self.steps > 3:
            time.sleep(3600)
        batch = self.waiting or self.running
        num_tokens = 10 * len(batch) if self.waiting else -len(batch)
        self.running += self.waiting
        self.waiting = []
        for seq in batch:
            seq[2].append(0)
        done = [seq for seq in batch if len(seq[2]) == seq[1]]
        self.running = [seq for seq in self.running if seq not in done]
        return [(seq[0], seq[2]) for seq in done], num_tokens

    def is_finished(self):
        return not self.waiting and not self.running

    def generate(self, prompts, sampling_params, use_tqdm=True):
        for prompt, sp in zip(prompts, sampling_params):
            self.add_request(prompt, sp)
        outputs = {}
        while not self.is_finished():
            for seq_id, ids in self.step()[0]:
                outputs[seq_id] = ids
        return [{"text": self.tokenizer.decode(ids), "token_ids": ids}
                for _, ids in sorted(outputs.items())]

    def exit(self):
        pass
""",
}


def standin(tmp_path: Path, fail: str = "", tp: int | str = 1) -> tuple[Path, dict]:
    root = tmp_path / "standin"
    for name, text in STANDIN.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    (root / "COMMIT").write_text("0123456789abcdef stand-in\n")
    env = {
        "BUBBLELAB_NANOVLLM_STANDIN": "1",
        "EXPECT_ENV": json.dumps(NO_MULTICAST),
        "EXPECT_TP": str(tp),
        "STANDIN_FAIL": fail,
        "STANDIN_PID_FILE": str(tmp_path / "standin.pid"),
    }
    return root, env


@pytest.mark.parametrize("tp", ["1", "1,2"])
def test_standin_runs_interleaved(tmp_path, tp):
    """nano-vllm's child takes turns with bubblelab (A B C A B C), `generate` for (a) and a closed
    loop for (b); at --tensor-parallel 1,2 a child a size and bubblelab at each size (TP 2: worker
    processes, one engine for both depths), all interleaved, with NVLink multicast off in the
    children's environment; each engine's speed-up is over nano-vllm on as many GPUs, with issue
    #26's targets on one GPU (the closed loop at one stream has its own); the children are gone
    afterwards."""
    path, env = standin(tmp_path, tp=tp)
    out = tmp_path / "out"
    sizes = [int(n) for n in tp.split(",")]
    parts = ("a", "b") if sizes == [1] else ("a",)
    args = ["--parts", ",".join(parts), "--streams", "1,2", "--repeats", "2"]
    result = run_harness(out, *args, "--tensor-parallel", tp, "--nanovllm-path", str(path), env=env)
    assert result["not_run"] == []
    nanos = {1: "nano-vllm", 2: "nano-vllm (TP 2)"}
    assert result["nanovllm"]["labels"] == {str(n): nanos[n] for n in sizes}
    assert result["nanovllm"]["commit"].startswith("0123")
    assert result["nanovllm"]["nanovllm_file"] == str(path / "nanovllm" / "__init__.py")
    ours = {
        (n, d): f"bubblelab-tp{n}-d{d}" if n > 1 else f"bubblelab-d{d}"
        for n in (1, 2)
        for d in (1, 2)
    }
    engines = [nanos[n] for n in sizes] + [ours[n, d] for n in sizes for d in (1, 2)]
    gpus = {nanos[n]: n for n in sizes} | {ours[n, d]: n for n in sizes for d in (1, 2)}
    order = [(r["case"], r["repeat"], r["engine"]) for r in result["runs"]]
    cases = (["writeup"], ["decode-1", "decode-2"])[: len(parts)]
    assert order == [
        (c, r, e) for group in cases for r in (-1, 0, 1) for c in group for e in engines
    ]
    for run in result["runs"]:
        assert run["generated_tokens"] == result["cases"][run["case"]]["output_tokens"]
        assert run["gpus"] == gpus[run["engine"]]
    check_floors(result)
    rows = {(r["case"], r["engine"]): r for r in result["summary"]}
    for n in sizes:
        d2 = rows[("writeup", ours[n, 2])]
        nano = rows[("writeup", nanos[n])]
        assert d2["vs_nanovllm"] == pytest.approx(nano["wall_s"] / d2["wall_s"])
    markdown = (out / "compare_nanovllm.md").read_text()
    assert "nano-vllm 0123456789ab" in markdown
    nano = nanos[1]
    if sizes == [1]:
        assert (d2["target"], rows[("writeup", ours[1, 1])]["target"]) == (1.30, 1.10)
        assert rows[("decode-1", ours[1, 2])]["target"] == 1.20
        more = [rows[("decode-2", ours[1, d])]["target"] for d in (1, 2)]
        assert more == [1.0, 1.0]
        assert "target" not in rows[("decode-2", nano)] and ">= 1.30x: " in markdown
    else:
        assert not any("target" in r for r in result["summary"] if r["gpus"] == 2)
    assert_gone(tmp_path / "standin.pid")


@pytest.mark.parametrize("fail", ["init", "hang"])
def test_standin_failure_or_hang_is_one_line_and_the_rest_runs(tmp_path, fail):
    """A child that fails to start, or hangs mid-run (killed at --run-timeout-s), is one "not run"
    line; bubblelab's rows are all there; no child is left behind."""
    path, env = standin(tmp_path, fail=fail)
    out = tmp_path / "out"
    args = ["--parts", "b", "--streams", "1", "--repeats", "1", "--run-timeout-s", "5"]
    result = run_harness(out, *args, "--nanovllm-path", str(path), env=env)
    [line] = result["not_run"]
    assert line["engine"] == "nano-vllm" and "\n" not in line["reason"]
    if fail == "init":
        assert line["reason"] == "init failed: RuntimeError: stand-in failure"
    else:
        assert line["reason"].startswith("failed at (b) decode-1, warm-up: PeerError: ")
        assert "no answer within 5 s: killed" in line["reason"]
        assert_gone(tmp_path / "standin.pid")
    assert {r["engine"] for r in result["runs"]} == {"bubblelab-d1", "bubblelab-d2"}
    assert len(result["runs"]) == 4


def assert_gone(pid_file: Path) -> None:
    """Every nano-vllm child that wrote its pid to `pid_file` has exited."""
    for pid in map(int, pid_file.read_text().split()):
        for _ in range(50):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            raise AssertionError(f"the nano-vllm child {pid} is still running")


def test_a_tp1_nano_child_leaves_the_fixed_rendezvous_port_to_a_tp2_child():
    """nano-vllm's fixed tcp://localhost:2333, held by another process (a TP-2 child): a TP-1
    child still makes its group, at a port of its own (in a child process, as the harness runs
    it)."""
    script = """
import socket
import torch.distributed as dist
from benchmarks.peer_nanovllm import own_rendezvous_port
held = socket.socket()
held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    held.bind(("127.0.0.1", 2333))
    held.listen()
except OSError:
    pass  # already taken by someone else: the point holds all the same
own_rendezvous_port()
dist.init_process_group("gloo", "tcp://localhost:2333", world_size=1, rank=0)
print("world", dist.get_world_size())
dist.destroy_process_group()
"""
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT,
        timeout=120,
    )  # fmt: skip
    assert result.returncode == 0 and "world 1" in result.stdout, result.stderr[-2000:]
