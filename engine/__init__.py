"""bubblelab's inference engine: paged KV cache, continuous batching, CUDA graphs and pipelined
decoding."""

from .config import EngineConfig
from .sampling_params import SamplingParams

__all__ = ["LLM", "SamplingParams", "EngineConfig"]


def __getattr__(name: str):
    # Lazy: importing engine.config or bubblelab.core.errors must not pull in models and tokenizers.
    if name == "LLM":
        from .llm import LLM

        return LLM
    raise AttributeError(name)
