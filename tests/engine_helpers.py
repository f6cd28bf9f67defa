"""Drive an engine through a scripted workload: arrivals at given ticks, aborts at given ticks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from hypothesis import strategies as st

from bubblelab.engine.attention.metadata import AttentionMetadata
from bubblelab.engine.config import EngineConfig
from bubblelab.engine.llm_engine import LLMEngine
from bubblelab.engine.loader import LoadedModel
from bubblelab.engine.sampling_params import SamplingParams


@dataclass
class Req:
    rid: str
    prompt: list[int]
    params: SamplingParams
    arrive_tick: int = 0
    abort_tick: int | None = None


@dataclass
class Outcome:
    tokens: dict[str, list[int]] = field(default_factory=dict)
    reasons: dict[str, str | None] = field(default_factory=dict)
    preemptions: int = 0
    ticks: int = 0


def make_engine(loaded: LoadedModel, **options: Any) -> LLMEngine:
    defaults: dict[str, Any] = dict(
        model="test",
        max_num_seqs=8,
        max_model_len=128,
        block_size=4,
        num_kv_blocks=128,
        debug=True,
    )
    return LLMEngine(EngineConfig(**{**defaults, **options}), loaded)


def random_workload(data, vocab: int = 512) -> list[Req]:
    """A hypothesis-drawn mix: plain and constrained rows, sampling options, stop tokens, arrivals,
    aborts."""
    n = data.draw(st.integers(1, 8), label="requests")
    reqs = []
    for i in range(n):
        kind = data.draw(st.sampled_from(["plain", "plain", "point", "detect"]))
        params = SamplingParams(
            max_tokens=data.draw(st.integers(1, 40))
            if kind == "plain"
            else data.draw(st.integers(20, 48)),
            temperature=data.draw(st.sampled_from([0.0, 0.7, 1.3])),
            top_k=data.draw(st.sampled_from([0, 5])),
            top_p=data.draw(st.sampled_from([1.0, 0.9])),
            seed=data.draw(st.integers(0, 2**31 - 1)),
            # Stop tokens drawn from the whole vocabulary: EOS lands at every position somewhere in
            # the suite.
            stop_token_ids=tuple(data.draw(st.sets(st.integers(3, vocab - 1), max_size=60)))
            if kind == "plain"
            else (),
            constraint=None if kind == "plain" else kind,
        )
        reqs.append(
            Req(
                f"r{i}",
                data.draw(st.lists(st.integers(3, vocab - 1), min_size=1, max_size=24)),
                params,
                arrive_tick=data.draw(st.integers(0, 40)),
                abort_tick=data.draw(st.one_of(st.none(), st.none(), st.integers(0, 80))),
            )
        )
    return reqs


def make_tp_engine(preset: str, seed: int, tensor_parallel: int = 2, **options) -> LLMEngine:
    """make_engine's configuration for a tensor-parallel engine, which loads its own shards of a
    preset."""
    defaults: dict[str, Any] = dict(
        max_num_seqs=8, max_model_len=128, block_size=4, num_kv_blocks=128, debug=True
    )
    defaults.update(options)
    config = EngineConfig(model=preset, seed=seed, tensor_parallel=tensor_parallel, **defaults)
    return LLMEngine(config)


def run_script(engine: LLMEngine, reqs: list[Req], max_ticks: int = 20000) -> Outcome:
    out = Outcome()
    pending = sorted(reqs, key=lambda r: r.arrive_tick)
    tick = 0
    while pending or engine.has_unfinished():
        while pending and pending[0].arrive_tick <= tick:
            r = pending.pop(0)
            engine.add_request(r.rid, r.prompt, r.params)
        for r in reqs:
            if r.abort_tick == tick:
                engine.abort(r.rid)
        if engine.has_unfinished():
            for o in engine.step():
                if o.finished:
                    out.tokens[o.request_id] = o.token_ids
                    out.reasons[o.request_id] = o.finish_reason
        tick += 1
        assert tick < max_ticks, "engine made no progress"
    for r in reqs:  # aborted requests keep what they had committed
        seq = engine.seqs[r.rid]
        out.tokens.setdefault(r.rid, seq.output_ids)
        out.reasons.setdefault(r.rid, seq.finish_reason)
    out.preemptions = engine.scheduler.num_preemptions
    out.ticks = tick
    engine.check_idle()
    return out


def paged_decode_inputs(
    block_tables: torch.Tensor, block_size: int, vocab_size: int
) -> tuple[torch.Tensor, torch.Tensor, AttentionMetadata]:
    """One decode row per block-table row, at lengths that end mid-page and on a page boundary
    (static buffers, as the engine keeps them for graph replay): (input_ids, positions, meta)."""
    device = block_tables.device
    context_lens = torch.tensor(
        [3, block_size + 1, 7, 2 * block_size], device=device, dtype=torch.int32
    )
    positions = context_lens.long() - 1
    slot_mapping = (
        block_tables.gather(1, (positions // block_size)[:, None]).squeeze(1).long() * block_size
        + positions % block_size
    )
    input_ids = torch.randint(0, vocab_size, (len(context_lens),), device=device)
    meta = AttentionMetadata(
        is_prefill=False,
        slot_mapping=slot_mapping,
        context_lens=context_lens,
        block_tables=block_tables,
    )
    return input_ids, positions, meta
