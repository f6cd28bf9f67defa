"""The offline API: `LLM(...).generate(prompts, SamplingParams(...))`."""

from __future__ import annotations

import itertools
import numbers
from collections.abc import Callable
from collections.abc import Sequence as Seq
from dataclasses import dataclass
from typing import cast

from ..core.errors import RequestError
from .config import EngineConfig
from .llm_engine import LLMEngine
from .sampling_params import SamplingParams

_request_numbers = itertools.count()  # request ids never repeat in a process, whatever failed


@dataclass
class GenerationOutput:
    request_id: str
    prompt_token_ids: list[int]
    token_ids: list[int]
    text: str | None
    finish_reason: str | None


class LLM:
    """`LLM()` loads the embedded default model (SmolLM2-135M-Instruct GGUF) on the CPU.

    `with LLM(...) as llm:` closes it at the end of the block (close() does too); one with
    `tensor_parallel > 1` starts worker processes, which a script must do under
    `if __name__ == "__main__":`."""

    def __init__(self, model: str | None = None, **engine_options):
        self.engine = LLMEngine(EngineConfig(model=model, **engine_options))
        self.tokenizer = self.engine.tokenizer

    def generate(
        self,
        prompts: str | list[int] | Seq[str | list[int]],
        params: SamplingParams | Seq[SamplingParams] | None = None,
        on_step: Callable[[], None] | None = None,
    ) -> list[GenerationOutput]:
        """Generate for one prompt (a string or a list of token ids) or a batch of them.

        The batch is validated whole before anything is queued: a bad prompt or option raises
        RequestError and the engine is left as it was, ready for the next call. An exception while
        generating (from `on_step`, Ctrl-C) ends this call's requests before it propagates.

        finish_reason: "stop" (EOS or a stop token), "length" (max_tokens or max_model_len),
        "cut" (a constrained output that length ended before its grammar was complete: it does not
        parse), "dead_end" (the grammar allowed no next token)."""
        batch = _batch(prompts)
        params = SamplingParams() if params is None else params
        if isinstance(params, SamplingParams):
            per_prompt = [params] * len(batch)
        elif isinstance(params, Seq):
            per_prompt = list(params)
        else:
            raise RequestError(
                f"params must be SamplingParams or a list of them, got {type(params).__name__}"
            )
        if len(per_prompt) != len(batch):
            raise RequestError(
                f"{len(per_prompt)} SamplingParams for {len(batch)} prompts: give one, or one each"
            )
        engine = self.engine
        ids = [f"gen-{next(_request_numbers)}" for _ in batch]
        try:
            engine.add_requests(zip(ids, batch, per_prompt, strict=True))
        except RequestError as e:  # the caller knows its prompts by position, not by our ids
            message = str(e)
            for i, rid in enumerate(ids):
                message = message.replace(f"request {rid!r}", f"prompt {i}")
            raise RequestError(message) from None
        try:
            while engine.has_unfinished():
                engine.step()
                if on_step is not None:
                    on_step()
        except BaseException:
            engine.cancel(ids)
            raise
        results = []
        for rid in ids:
            seq = engine.seqs.pop(rid)
            # One sequence's ids decode to one string (transformers annotates str | list[str]).
            text = (
                cast(str, self.tokenizer.decode(seq.output_ids, skip_special_tokens=True))
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

    def __enter__(self) -> LLM:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _batch(prompts: object) -> list:
    """One prompt (a string, or a list of token ids) as a batch of one; a list of prompts as is."""
    if isinstance(prompts, str):
        return [prompts]
    if not isinstance(prompts, Seq) or isinstance(prompts, (bytes, bytearray)):
        raise RequestError(
            "prompts must be a string, a list of token ids, or a list of those; "
            f"got {type(prompts).__name__}"
        )
    if not prompts:
        raise RequestError("no prompts: give a prompt or a non-empty list of prompts")
    return [prompts] if isinstance(prompts[0], numbers.Integral) else list(prompts)
