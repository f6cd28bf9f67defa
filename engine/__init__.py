"""bubblelab's inference engine: paged KV cache, continuous batching, CUDA graphs and pipelined
decoding."""

from bubblelab.engine.config import EngineConfig
from bubblelab.engine.sampling_params import SamplingParams

__all__ = ["LLM", "SamplingParams", "EngineConfig"]


def __getattr__(name: str):
    # Lazy: importing engine.config or bubblelab.errors must not pull in models and tokenizers.
    if name == "LLM":
        from bubblelab.engine.llm import LLM

        return LLM
    raise AttributeError(name)
