"""Decoder-only model families (Llama, Qwen3) in plain PyTorch."""

from bubblelab.engine.models.transformer import TransformerLM

__all__ = ["TransformerLM"]
