"""The offline API: `LLM(...).generate(prompts, SamplingParams(...))`."""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence as Seq
from dataclasses import dataclass

from bubblelab.engine.config import EngineConfig
from bubblelab.engine.llm_engine import LLMEngine
from bubblelab.engine.sampling_params import SamplingParams


@dataclass
class GenerationOutput:
    request_id: str
    prompt_token_ids: list[int]
    token_ids: list[int]
    text: str | None
    finish_reason: str | None


class LLM:
    """`LLM()` loads the embedded default model (SmolLM2-135M-Instruct GGUF) on the CPU."""

    def __init__(self, model: str | None = None, **engine_options):
        self.engine = LLMEngine(EngineConfig(model=model, **engine_options))
        self.tokenizer = self.engine.tokenizer

    def generate(
        self,
        prompts: str | list[int] | Seq[str | list[int]],
        params: SamplingParams | Seq[SamplingParams] | None = None,
        on_step: Callable[[], None] | None = None,
    ) -> list[GenerationOutput]:
        single = isinstance(prompts, str) or (bool(prompts) and isinstance(prompts[0], int))
        prompts = [prompts] if single else list(prompts)
        params = params or SamplingParams()
        params = [params] * len(prompts) if isinstance(params, SamplingParams) else list(params)
        engine = self.engine
        ids = [f"gen-{id(self)}-{engine.pipeline.next_step_id}-{i}" for i in range(len(prompts))]
        for rid, prompt, p in zip(ids, prompts, params):
            engine.add_request(rid, prompt, p)
        while engine.has_unfinished():
            engine.step()
            if on_step is not None:
                on_step()
        results = []
        for rid in ids:
            seq = engine.seqs.pop(rid)
            text = (
                self.tokenizer.decode(seq.output_ids, skip_special_tokens=True)
                if self.tokenizer
                else None
            )
            results.append(
                GenerationOutput(
                    rid,
                    seq.token_ids[: seq.num_prompt_tokens],
                    seq.output_ids,
                    text,
                    seq.finish_reason,
                )
            )
        return results

    def close(self) -> None:
        self.engine.close()
