"""Decoder-only model families (Llama, Qwen3) in plain PyTorch."""

from .transformer import TransformerLM

__all__ = ["TransformerLM"]
