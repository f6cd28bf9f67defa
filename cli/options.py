"""Options several commands share, defined once: the same flag means the same thing with the same
default on every command. The defaults are the library's (tests/test_cli_grammar.py keeps them
equal); they are written out here so that `--help` needs no torch import."""

from __future__ import annotations

import typer

MODEL = typer.Option(
    None, help="Preset name, HF checkpoint dir or GGUF file (default: the embedded SmolLM2)."
)
DEVICE = typer.Option("cpu", help="cpu, cuda or cuda:N.")
DTYPE = typer.Option(None, help="fp32, bf16 or fp16 (default: fp32 on CPU, bf16 on CUDA).")
STREAMS = typer.Option(
    "1,8,32", help="Concurrent requests: a number or a comma-separated list, one run each."
)
OUTPUT_LEN_MEAN = typer.Option(110.0, help="Mean generated length L.")
PROMPT_LEN = typer.Option(32, help="Prompt tokens per request.")
CONSTRAINT = typer.Option(None, help="point or detect: constrain requests (default: none).")
MAX_MODEL_LEN = typer.Option(512, help="Longest sequence the KV cache must hold.")
ATTENTION_BACKEND = typer.Option("auto", help="auto, torch, flash-attn or triton.")
SEED = typer.Option(0, help="Workload and sampling seed.")
N_BOOT = typer.Option(1000, help="Bootstrap resamples for the intervals (1 to 10000).")
FORCE = typer.Option(False, "--force", metavar="", help="Replace the run already in --out.")
JSON = typer.Option(
    None,
    "--json",
    metavar="[PATH|-]",
    help="Also write JSON: to PATH (a .json name, or any name as --json=PATH), or to stdout with "
    "- or no value.",
)
