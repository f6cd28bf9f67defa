"""Kept for benchmarks/fa4_smoke.py's engine_backend stage: the FA4 backend now lives in the engine
(engine/attention/flash_backend.py, FlashAttention(impl="fa4")); this is only an alias, no logic of its own."""

from __future__ import annotations

from bubblelab.engine.attention.flash_backend import FlashAttention


def FlashAttention4() -> FlashAttention:  # noqa: N802 - the name fa4_smoke imports
    return FlashAttention(impl="fa4")
