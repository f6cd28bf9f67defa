"""Sampler: batch invariance, reproducibility, the sampled distribution, filters and masks."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from bubblelab.engine import sampler
from bubblelab.engine.sampler import (
    SamplingBatch,
    apply_bitmask,
    bitmask_words,
    column_keys,
    noisy_argmax,
    row_keys,
    sample,
    temperature_sample,
    warmup,
)
from bubblelab.engine.sampling_params import SamplingParams

FAST = settings(max_examples=60, deadline=None)

params_st = st.builds(
    SamplingParams,
    temperature=st.one_of(st.just(0.0), st.floats(0.1, 2.0)),
    top_k=st.one_of(st.just(0), st.integers(1, 40)),
    top_p=st.one_of(st.just(1.0), st.floats(0.05, 1.0)),
)


@st.composite
def batches(draw, max_rows: int = 8):
    """(logits [B, V], params, seeds, counters) for a random small batch."""
    rows = draw(st.integers(1, max_rows))
    vocab = draw(st.integers(2, 70))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    scale = draw(st.sampled_from([0.1, 1.0, 5.0]))
    logits = torch.randn(rows, vocab, generator=gen) * scale
    params = draw(st.lists(params_st, min_size=rows, max_size=rows))
    seeds = draw(st.lists(st.integers(0, 2**31 - 1), min_size=rows, max_size=rows))
    counters = draw(st.lists(st.integers(0, 10_000), min_size=rows, max_size=rows))
    return logits, params, seeds, counters


def run(logits, params, seeds, counters, bitmask=None, device: str = "cpu") -> list[int]:
    return sample(logits, SamplingBatch.build(params, seeds, counters, device), bitmask).tolist()


@FAST
@given(batches(), st.randoms(use_true_random=False))
def test_row_result_is_independent_of_batch_composition(case, rnd):
    logits, params, seeds, counters = case
    together = run(logits, params, seeds, counters)
    alone = [
        run(logits[i : i + 1], [params[i]], [seeds[i]], [counters[i]])[0]
        for i in range(len(params))
    ]
    assert together == alone
    order = list(range(len(params)))
    rnd.shuffle(order)
    shuffled = run(
        logits[order],
        [params[i] for i in order],
        [seeds[i] for i in order],
        [counters[i] for i in order],
    )
    assert shuffled == [together[i] for i in order]


@FAST
@given(batches())
def test_sampling_is_reproducible(case):
    assert run(*case) == run(*case)


def test_seeds_and_counters_change_the_draw():
    logits = torch.zeros(1, 1000)  # uniform: every draw is pure noise
    hot = SamplingParams(temperature=1.0)
    by_seed = {run(logits, [hot], [s], [0])[0] for s in range(50)}
    by_counter = {run(logits, [hot], [7], [c])[0] for c in range(50)}
    assert len(by_seed) > 40 and len(by_counter) > 40


def _expected(logits: np.ndarray, temperature: float, top_k: int, top_p: float) -> np.ndarray:
    """Reference distribution in float64: temperature, then top-k, then the nucleus."""
    z = logits / temperature
    if top_k:
        z = np.where(z >= np.sort(z)[::-1][min(top_k, len(z)) - 1], z, -np.inf)
    p = np.exp(z - z.max())
    p /= p.sum()
    if top_p < 1:
        order = np.argsort(-p, kind="stable")
        before = np.cumsum(p[order]) - p[order]
        keep = np.zeros_like(p, dtype=bool)
        keep[order[before < top_p]] = True
        p = np.where(keep, p, 0)
        p /= p.sum()
    return p


@pytest.mark.parametrize(
    "temperature,top_k,top_p",
    [(1.0, 0, 1.0), (0.5, 0, 1.0), (1.0, 3, 1.0), (1.0, 0, 0.7), (1.5, 4, 0.9)],
)
def test_empirical_distribution_matches_softmax(temperature, top_k, top_p):
    base = np.array([1.0, 0.5, 0.0, -0.3, -1.0, 0.2], dtype=np.float32)
    n = 20_000  # one row per counter: the counter is what varies between draws
    params = [SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p)] * n
    tokens = run(torch.from_numpy(base).expand(n, -1), params, [1234] * n, range(n))
    freq = np.bincount(tokens, minlength=len(base)) / n
    expected = _expected(base.astype(np.float64), temperature, top_k, top_p)
    assert np.abs(freq - expected).max() < 0.015  # ~4 sigma at n = 20k
    assert (freq[expected == 0] == 0).all()


@FAST
@given(batches())
def test_filters_never_pick_excluded_tokens(case):
    logits, params, seeds, counters = case
    for row, (p, token) in enumerate(
        zip(params, run(logits, params, seeds, counters), strict=True)
    ):
        if p.greedy:
            assert logits[row, token] == logits[row].max()
            continue
        # Scale in float32 as the sampler does, so ties at the top-k floor are the sampler's ties.
        z = (logits[row] / torch.tensor(p.temperature, dtype=torch.float32)).double().numpy()
        if p.top_k:
            assert z[token] >= np.sort(z)[::-1][min(p.top_k, len(z)) - 1]
        if p.top_p < 1:
            probs = _expected(z, 1.0, p.top_k, 1.0)
            mass_before = probs[probs > probs[token]].sum()
            assert mass_before < p.top_p + 1e-5


@st.composite
def masked_batches(draw):
    logits, params, seeds, counters = draw(batches())
    rows, vocab = logits.shape
    allowed = np.array(
        draw(
            st.lists(
                st.lists(st.booleans(), min_size=vocab, max_size=vocab),
                min_size=rows,
                max_size=rows,
            )
        )
    )
    allowed[
        np.arange(rows), draw(st.lists(st.integers(0, vocab - 1), min_size=rows, max_size=rows))
    ] = True
    return logits, params, seeds, counters, allowed


def pack_bitmask(allowed: np.ndarray) -> torch.Tensor:
    rows, vocab = allowed.shape
    bits = np.zeros((rows, bitmask_words(vocab) * 32), dtype=bool)
    bits[:, :vocab] = allowed
    words = np.packbits(bits, axis=-1, bitorder="little").view(
        "<u4"
    )  # bit j of word w = token 32w+j
    return torch.from_numpy(words.view(np.int32))


@FAST
@given(masked_batches())
def test_masked_tokens_are_never_chosen(case):
    logits, params, seeds, counters, allowed = case
    tokens = run(logits, params, seeds, counters, pack_bitmask(allowed))
    for row, (p, token) in enumerate(zip(params, tokens, strict=True)):
        assert allowed[row, token]
        if p.greedy:
            assert logits[row, token] == logits[row][torch.from_numpy(allowed[row])].max()


def test_apply_bitmask_layout():
    logits = torch.zeros(1, 70)
    allowed = np.zeros((1, 70), dtype=bool)
    allowed[0, [0, 31, 32, 69]] = True  # bit 31 makes the first word negative
    out = apply_bitmask(logits, pack_bitmask(allowed))
    assert torch.isfinite(out[0]).nonzero().flatten().tolist() == [0, 31, 32, 69]


QWEN_VOCAB = 151_936
MIXED = [
    SamplingParams(temperature=0.7, top_k=20, top_p=0.9),
    SamplingParams(),
    SamplingParams(temperature=1.0, top_k=50),
    SamplingParams(temperature=0.5, top_p=0.8),
    SamplingParams(temperature=1.0),
]


@pytest.fixture(scope="module")
def compiled_cuda_sampler():
    warmup(
        QWEN_VOCAB, "cuda"
    )  # switches Gumbel-max to the torch.compile'd kernel, as the engine does
    assert noisy_argmax in sampler._compiled, "torch.compile of the sampler failed (see warnings)"
    return sampler._compiled[noisy_argmax]


def gpu_case(rows: int):
    logits = (
        torch.randn(
            rows, QWEN_VOCAB, device="cuda", generator=torch.Generator("cuda").manual_seed(rows)
        )
        * 3
    )
    return (
        logits,
        [MIXED[i % len(MIXED)] for i in range(rows)],
        list(range(rows)),
        [7 * i for i in range(rows)],
    )


@pytest.mark.gpu  # tests/conftest.py skips these without CUDA
@pytest.mark.parametrize("batch_size", [1, 256])
def test_sample_never_syncs_the_host(compiled_cuda_sampler, batch_size):
    logits, params, seeds, counters = gpu_case(batch_size)
    batch = SamplingBatch.build(params, seeds, counters, device="cuda")
    bitmask = torch.full(
        (batch_size, bitmask_words(QWEN_VOCAB)), -1, dtype=torch.int32, device="cuda"
    )
    bitmask[:, 0] = 0x0F0F0F0F
    expected = sample(logits, batch, bitmask)  # first use: per-device caches
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = sample(logits, batch, bitmask)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.equal(out, expected)


@pytest.mark.gpu
def test_gpu_rows_are_batch_invariant(compiled_cuda_sampler):
    logits, params, seeds, counters = gpu_case(256)
    together = run(logits, params, seeds, counters, device="cuda")
    for i in range(0, 256, 17):
        assert run(logits[i : i + 1], [params[i]], [seeds[i]], [counters[i]], device="cuda") == [
            together[i]
        ], i
    order = list(range(255, -1, -1))
    shuffled = run(
        logits[order],
        [params[i] for i in order],
        [seeds[i] for i in order],
        [counters[i] for i in order],
        device="cuda",
    )
    assert shuffled == [together[i] for i in order]


@pytest.mark.gpu
def test_gpu_distribution_matches_softmax(compiled_cuda_sampler):
    base = np.array([1.0, 0.5, 0.0, -0.3, -1.0, 0.2], dtype=np.float32)
    n = 20_000
    params = [SamplingParams(temperature=1.0, top_p=0.9)] * n
    tokens = run(
        torch.from_numpy(base).cuda().expand(n, -1), params, [99] * n, range(n), device="cuda"
    )
    freq = np.bincount(tokens, minlength=len(base)) / n
    assert np.abs(freq - _expected(base.astype(np.float64), 1.0, 0, 0.9)).max() < 0.015


@pytest.mark.gpu
def test_gpu_compiled_gumbel_max_agrees_with_eager(compiled_cuda_sampler):
    logits, _, seeds, counters = gpu_case(256)
    keys = row_keys(
        torch.tensor(seeds, dtype=torch.int32, device="cuda"),
        torch.tensor(counters, dtype=torch.int32, device="cuda"),
    )
    columns = column_keys(QWEN_VOCAB, logits.device)
    fused, eager = compiled_cuda_sampler(logits, keys, columns), noisy_argmax(logits, keys, columns)
    assert (
        fused == eager
    ).float().mean().item() > 0.99  # only last-ulp log differences may flip a near-tie


@pytest.mark.gpu
def test_gpu_compiled_temperature_sample_agrees_with_eager(compiled_cuda_sampler):
    """The common case's one compiled kernel (cast, greedy rows, temperature, Gumbel-max) against
    the same function run eagerly, on bf16 logits as the model hands them over."""
    logits, _, seeds, counters = gpu_case(256)
    logits = logits.bfloat16()
    temperature = torch.tensor([0.0, 0.6, 1.0, 1.7] * 64, device="cuda")
    seed = torch.tensor(seeds, dtype=torch.int32, device="cuda")
    counter = torch.tensor(counters, dtype=torch.int32, device="cuda")
    columns = column_keys(QWEN_VOCAB, logits.device)
    args = (logits, temperature, seed, counter, columns)
    fused = sampler._compiled[temperature_sample](*args)
    eager = temperature_sample(*args)
    greedy = temperature == 0
    assert torch.equal(fused[greedy], logits.float().argmax(-1)[greedy])
    assert (fused == eager).float().mean().item() > 0.99  # last-ulp log differences only
