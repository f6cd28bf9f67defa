"""Our TransformerLM against transformers' reference implementations, and paged decode against no
cache."""

from __future__ import annotations

import gguf
import pytest
import torch
from transformers import (
    AutoModelForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from bubblelab.core.errors import BubblelabError
from bubblelab.engine.attention import AttentionMetadata, select_backend, store_kv_cache
from bubblelab.engine.gguf_loader import gguf_checkpoint
from bubblelab.engine.loader import embedded_model_path, load_model
from bubblelab.engine.tokenizer import chat_prompt_ids
from tests.engine_helpers import paged_decode_inputs

PROMPT_LENS = [5, 17, 11]

TINY_LLAMA = LlamaConfig(
    vocab_size=300,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    rms_norm_eps=1e-5,
    tie_word_embeddings=True,
    max_position_embeddings=256,
    rope_parameters={
        "rope_type": "llama3",
        "rope_theta": 10000.0,
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64,
    },
)
# head_dim != hidden / heads and untied lm_head, as in the real Qwen3 checkpoints.
TINY_QWEN3 = Qwen3Config(
    vocab_size=300,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    tie_word_embeddings=False,
    max_position_embeddings=256,
    rope_parameters={"rope_type": "default", "rope_theta": 1e6},
)


def max_rel_err(ours: torch.Tensor, ref: torch.Tensor) -> float:
    """Largest absolute difference relative to the largest reference logit."""
    return ((ours - ref).abs().max() / ref.abs().max()).item()


def flat_prompt_logits(model, prompts: list[torch.Tensor]) -> list[torch.Tensor]:
    """All prompts in one flat batch (positions restart per prompt), split back per prompt."""
    meta = AttentionMetadata.for_prompts([len(p) for p in prompts])
    positions = torch.cat([torch.arange(len(p)) for p in prompts])
    logits = model.compute_logits(model(torch.cat(prompts), positions, meta))
    return list(logits.split([len(p) for p in prompts]))


@pytest.mark.parametrize(
    "hf_class,hf_config",
    [(LlamaForCausalLM, TINY_LLAMA), (Qwen3ForCausalLM, TINY_QWEN3)],
    ids=["llama-llama3-rope", "qwen3"],
)
@torch.inference_mode()
def test_tiny_model_matches_transformers(hf_class, hf_config, tmp_path):
    torch.manual_seed(0)
    hf = hf_class(hf_config).eval()
    for p in hf.parameters():  # perturb everything, norms included, so no weight is a no-op
        p.add_(torch.randn_like(p) * 0.05)
    hf.save_pretrained(tmp_path)
    loaded = load_model(str(tmp_path), attention_backend="torch")
    assert loaded.source == "hf" and loaded.config.architecture == hf_config.model_type

    prompts = [torch.randint(0, hf_config.vocab_size, (n,)) for n in PROMPT_LENS]
    ours = flat_prompt_logits(loaded.model, prompts)
    for prompt, logits in zip(prompts, ours, strict=True):
        ref = hf(prompt[None]).logits[0]
        assert max_rel_err(logits, ref) < 1e-4


@pytest.mark.slow
@torch.inference_mode()
def test_embedded_gguf_matches_transformers_gguf_loading():
    path = embedded_model_path()
    loaded = load_model(None)
    hf = AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=torch.float32
    ).eval()
    prompts = [
        torch.tensor(chat_prompt_ids(loaded.tokenizer, "What is the capital of France?")),
        torch.tensor(loaded.tokenizer.encode("The quick brown fox jumps over the lazy dog")),
    ]
    ours = flat_prompt_logits(loaded.model, prompts)
    for prompt, logits in zip(prompts, ours, strict=True):
        assert max_rel_err(logits, hf(prompt[None]).logits[0]) < 1e-4


@torch.inference_mode()
def test_qwen3_gguf_conversion_matches_transformers(tmp_path, monkeypatch):
    """A Qwen3 GGUF written with gguf's own HF->GGUF tensor names converts back to the same
    model."""
    monkeypatch.setenv("BUBBLELAB_CACHE", str(tmp_path / "cache"))
    torch.manual_seed(0)
    hf = Qwen3ForCausalLM(TINY_QWEN3).eval()
    for p in hf.parameters():
        p.add_(torch.randn_like(p) * 0.05)
    c, path = TINY_QWEN3, tmp_path / "tiny-qwen3.gguf"
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN3, c.num_hidden_layers)
    writer = gguf.GGUFWriter(str(path), "qwen3")
    for add, value in [
        (writer.add_block_count, c.num_hidden_layers),
        (writer.add_context_length, 256),
        (writer.add_embedding_length, c.hidden_size),
        (writer.add_head_count, c.num_attention_heads),
        (writer.add_feed_forward_length, c.intermediate_size),
        (writer.add_key_length, c.head_dim),
        (writer.add_head_count_kv, c.num_key_value_heads),
        (writer.add_rope_freq_base, 1e6),
        (writer.add_layer_norm_rms_eps, c.rms_norm_eps),
        (writer.add_vocab_size, c.vocab_size),
    ]:
        add(value)
    for name, tensor in hf.state_dict().items():
        writer.add_tensor(names.get_name(name, try_suffixes=(".weight",)), tensor.numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    loaded = load_model(str(gguf_checkpoint(path)), attention_backend="torch")
    prompts = [torch.randint(0, c.vocab_size, (n,)) for n in PROMPT_LENS]
    for prompt, logits in zip(prompts, flat_prompt_logits(loaded.model, prompts), strict=True):
        assert max_rel_err(logits, hf(prompt[None]).logits[0]) < 1e-4


def _pages(num_blocks: int, rows: int, blocks_per_row: int, seed: int = 0) -> torch.Tensor:
    """Non-contiguous pages per row, so a wrong block-table lookup cannot pass by accident."""
    perm = torch.randperm(num_blocks, generator=torch.Generator().manual_seed(seed))
    return perm[: rows * blocks_per_row].view(rows, blocks_per_row).to(torch.int32)


@pytest.mark.parametrize("preset", ["tiny-llama", "tiny-qwen3"])
@torch.inference_mode()
def test_paged_decode_matches_full_prefix(preset):
    model = load_model(preset, seed=3, attention_backend="torch").model
    cfg = model.config
    block_size, num_blocks, blocks_per_row = (
        4,
        32,
        8,
    )  # wider than needed: unused pages must not matter
    shape = (num_blocks, block_size, cfg.num_kv_heads, cfg.head_dim)
    model.bind_kv_cache(
        [torch.zeros(shape) for _ in range(cfg.num_layers)],
        [torch.zeros(shape) for _ in range(cfg.num_layers)],
    )
    block_tables = _pages(num_blocks, len(PROMPT_LENS), blocks_per_row)

    def slots(row: int, positions: torch.Tensor) -> torch.Tensor:
        return (
            block_tables[row, positions // block_size].long() * block_size + positions % block_size
        )

    # Prefill all rows in one flat batch, writing their K/V into the pages.
    seqs = [torch.randint(0, cfg.vocab_size, (n,)).tolist() for n in PROMPT_LENS]
    meta = AttentionMetadata.for_prompts(PROMPT_LENS)
    meta.slot_mapping = torch.cat([slots(r, torch.arange(n)) for r, n in enumerate(PROMPT_LENS)])
    positions = torch.cat([torch.arange(n) for n in PROMPT_LENS])
    hidden = model(torch.tensor(sum(seqs, [])), positions, meta)
    last = torch.tensor(PROMPT_LENS).cumsum(0) - 1
    next_ids = model.compute_logits(hidden[last]).argmax(-1)

    for _ in range(5):  # crosses page boundaries for every row
        for seq, token in zip(seqs, next_ids.tolist(), strict=True):
            seq.append(token)
        lens = torch.tensor([len(s) for s in seqs])
        pos = lens - 1
        meta = AttentionMetadata(
            is_prefill=False,
            slot_mapping=torch.stack([slots(r, p) for r, p in enumerate(pos)]),
            context_lens=lens.to(torch.int32),
            block_tables=block_tables,
        )
        decode_logits = model.compute_logits(model(next_ids, pos, meta))
        for row, seq in enumerate(
            seqs
        ):  # oracle: the whole prefix, no cache involved (slot_mapping None)
            full = model(
                torch.tensor(seq), torch.arange(len(seq)), AttentionMetadata.for_prompts([len(seq)])
            )
            assert max_rel_err(decode_logits[row], model.compute_logits(full[-1])) < 1e-5
        next_ids = decode_logits.argmax(-1)


def test_select_backend():
    assert select_backend("auto", "cpu").name == "torch"
    assert select_backend("torch", "cpu").name == "torch"
    with pytest.raises(BubblelabError, match="flash-attn"):
        select_backend("flash-attn", "cpu")
    with pytest.raises(BubblelabError, match="unknown attention backend"):
        select_backend("xformers", "cpu")


def _flash_available() -> bool:
    try:
        import flash_attn  # noqa: F401
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.mark.gpu
@pytest.mark.skipif(not _flash_available(), reason="needs a CUDA GPU with flash-attn")
@torch.inference_mode()
def test_flash_backend_agrees_with_torch_backend():
    torch.manual_seed(0)
    heads, kv_heads, dim, block_size, dtype = 8, 2, 64, 256, torch.bfloat16
    torch_backend, flash = select_backend("torch", "cuda"), select_backend("flash-attn", "cuda")
    lens = [37, 300, 5]
    n = sum(lens)
    q, k, v = (
        torch.randn(n, h, dim, device="cuda", dtype=dtype) for h in (heads, kv_heads, kv_heads)
    )
    meta = AttentionMetadata.for_prompts(lens, "cuda")
    torch.testing.assert_close(
        flash.forward(q, k, v, None, None, meta, dim**-0.5),
        torch_backend.forward(q, k, v, None, None, meta, dim**-0.5),
        atol=2e-2,
        rtol=2e-2,
    )

    # Decode over pages: the cache already holds each row's context; the current token's K/V is
    # written now.
    num_blocks, blocks_per_row = 8, 2
    cache_shape = (num_blocks, block_size, kv_heads, dim)
    k_cache, v_cache = (torch.randn(cache_shape, device="cuda", dtype=dtype) for _ in range(2))
    block_tables = _pages(num_blocks, len(lens), blocks_per_row).cuda()
    context_lens = torch.tensor(lens, device="cuda", dtype=torch.int32)
    pos = context_lens.long() - 1
    slots = (
        block_tables.gather(1, (pos // block_size)[:, None]).squeeze(1).long() * block_size
        + pos % block_size
    )
    meta = AttentionMetadata(
        is_prefill=False, slot_mapping=slots, context_lens=context_lens, block_tables=block_tables
    )
    q, k, v = (
        torch.randn(len(lens), h, dim, device="cuda", dtype=dtype)
        for h in (heads, kv_heads, kv_heads)
    )
    store_kv_cache(k, v, k_cache, v_cache, slots)  # the model's job, before either backend runs
    ref = torch_backend.forward(q, k, v, k_cache, v_cache, meta, dim**-0.5)
    out = flash.forward(q, k, v, k_cache, v_cache, meta, dim**-0.5)
    torch.testing.assert_close(out, ref, atol=2e-2, rtol=2e-2)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("backend", ["torch", "flash-attn"])
@torch.inference_mode()
def test_decode_step_has_no_host_sync_and_replays_in_a_cuda_graph(backend):
    if backend == "flash-attn" and not _flash_available():
        pytest.skip("flash-attn not installed")
    block_size = 256 if backend == "flash-attn" else 16
    model = load_model("tiny-qwen3", dtype="bf16", device="cuda", attention_backend=backend).model
    cfg = model.config
    rows, num_blocks, blocks_per_row = 4, 16, 2
    shape = (num_blocks, block_size, cfg.num_kv_heads, cfg.head_dim)
    model.bind_kv_cache(
        [torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(cfg.num_layers)],
        [torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(cfg.num_layers)],
    )
    # Static input buffers, as the engine keeps them for graph replay.
    block_tables = _pages(num_blocks, rows, blocks_per_row).cuda()
    input_ids, positions, meta = paged_decode_inputs(block_tables, block_size, cfg.vocab_size)

    def step() -> torch.Tensor:
        return model.compute_logits(model(input_ids, positions, meta))

    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")  # any host sync inside the decode forward raises
    try:
        eager = step()
    finally:
        torch.cuda.set_sync_debug_mode("default")

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()  # warm-up outside capture (kernel selection, workspace allocation)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step()
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(captured, eager)

    input_ids.copy_(
        torch.randint(0, cfg.vocab_size, (rows,), device="cuda")
    )  # new inputs, same buffers
    graph.replay()
    torch.testing.assert_close(captured, step())
