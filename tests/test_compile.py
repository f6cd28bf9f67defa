"""torch.compile'd fused ops (EngineConfig.compile) against the eager model: prefill, paged decode,
engine."""

from __future__ import annotations

import pytest
import torch

from bubblelab.engine.attention import AttentionMetadata
from bubblelab.engine.loader import load_model
from bubblelab.engine.sampling_params import SamplingParams
from tests.engine_helpers import Req, make_engine, paged_decode_inputs, run_script

PROMPT_LENS = [5, 17, 11]
BLOCK_SIZE, NUM_BLOCKS, BLOCKS_PER_ROW = 4, 32, 8


@pytest.fixture(scope="module", params=["tiny-llama", "tiny-qwen3"])
def loaded(request):
    """One model per family; Inductor compiles each op once for the module (CPU compilation is
    slow)."""
    return load_model(request.param, seed=5, attention_backend="torch")


def run_steps(model, compiled: bool, decode_steps: int = 4) -> list[torch.Tensor]:
    """Prefill three prompts into fresh pages, then greedy paged decode; the logits of every
    step."""
    model.set_compile(compiled)
    cfg = model.config
    shape = (NUM_BLOCKS, BLOCK_SIZE, cfg.num_kv_heads, cfg.head_dim)
    model.bind_kv_cache(
        [torch.zeros(shape) for _ in range(cfg.num_layers)],
        [torch.zeros(shape) for _ in range(cfg.num_layers)],
    )
    g = torch.Generator().manual_seed(0)
    block_tables = (
        torch.randperm(NUM_BLOCKS, generator=g)[: 3 * BLOCKS_PER_ROW].view(3, -1).to(torch.int32)
    )
    ids = torch.randint(0, cfg.vocab_size, (sum(PROMPT_LENS),), generator=g)

    def slots(row: int, positions: torch.Tensor) -> torch.Tensor:
        return (
            block_tables[row, positions // BLOCK_SIZE].long() * BLOCK_SIZE + positions % BLOCK_SIZE
        )

    meta = AttentionMetadata.for_prompts(PROMPT_LENS)
    meta.slot_mapping = torch.cat([slots(r, torch.arange(n)) for r, n in enumerate(PROMPT_LENS)])
    hidden = model(ids, torch.cat([torch.arange(n) for n in PROMPT_LENS]), meta)
    logits = [model.compute_logits(hidden)]
    lens = torch.tensor(PROMPT_LENS)
    next_ids = logits[0][lens.cumsum(0) - 1].argmax(-1)
    for _ in range(decode_steps):  # crosses page boundaries
        lens += 1
        pos = lens - 1
        meta = AttentionMetadata(
            is_prefill=False,
            context_lens=lens.to(torch.int32),
            block_tables=block_tables,
            slot_mapping=torch.stack([slots(r, p) for r, p in enumerate(pos)]),
        )
        logits.append(model.compute_logits(model(next_ids, pos, meta)))
        next_ids = logits[-1].argmax(-1)
    return logits


@torch.inference_mode()
def test_compiled_prefill_and_paged_decode_match_eager(loaded):
    model = loaded.model
    eager, compiled = run_steps(model, False), run_steps(model, True)
    model.set_compile(False)
    assert len(compiled) == len(eager)
    for c, e in zip(
        compiled, eager, strict=True
    ):  # fp32: only the order of the fused reductions differs
        torch.testing.assert_close(c, e, atol=1e-5, rtol=1e-4)


def test_compile_defaults_to_eager_on_cpu(loaded):
    loaded.model.set_compile(None)
    assert not loaded.model.compile_enabled


def test_engine_with_compile_generates_the_eager_tokens(loaded):
    reqs = [
        Req(str(i), p, SamplingParams(max_tokens=6, ignore_eos=True), arrive_tick=i)
        for i, p in enumerate([[3, 14, 15, 92, 6], [5, 35], [8, 9, 7, 9, 3, 2, 3, 8]])
    ]
    tokens = {}
    for compiled in (False, True):
        engine = make_engine(loaded, compile=compiled)  # ModelRunner applies EngineConfig.compile
        assert loaded.model.compile_enabled is compiled
        tokens[compiled] = run_script(engine, reqs).tokens
        engine.close()
    loaded.model.set_compile(False)
    assert tokens[True] == tokens[False] and len(tokens[True]) == len(reqs)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@torch.inference_mode()
def test_compiled_decode_is_sync_free_and_replays_in_a_cuda_graph():
    model = load_model("tiny-qwen3", dtype="bf16", device="cuda", attention_backend="torch").model
    cfg = model.config
    rows, block_size, num_blocks = 4, 16, 16
    shape = (2, cfg.num_layers, num_blocks, block_size, cfg.num_kv_heads, cfg.head_dim)
    kv = torch.randn(
        shape, device="cuda", dtype=torch.bfloat16
    )  # one pool, as ModelRunner allocates it
    model.bind_kv_cache(list(kv[0]), list(kv[1]))
    block_tables = (
        torch.randperm(num_blocks, device="cuda")[: rows * 2].view(rows, 2).to(torch.int32)
    )
    input_ids, positions, meta = paged_decode_inputs(block_tables, block_size, cfg.vocab_size)

    def step() -> torch.Tensor:
        return model.compute_logits(model(input_ids, positions, meta))

    kv_before = kv.clone()
    eager = step()
    kv_eager = kv.clone()
    kv.copy_(kv_before)
    model.set_compile(True)
    step()  # compiles (and autotunes) outside the checks below
    kv.copy_(kv_before)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        compiled = step()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.testing.assert_close(compiled, eager, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(
        kv, kv_eager, atol=2e-2, rtol=2e-2
    )  # K/V written in place, nowhere else

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step()
    input_ids.copy_(
        torch.randint(0, cfg.vocab_size, (rows,), device="cuda")
    )  # new inputs, same buffers
    graph.replay()
    torch.testing.assert_close(captured, step())
