"""Sampling replayed from per-bucket CUDA graphs gives the tokens eager sampling gives (GPU
only)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from bubblelab.engine.constraints import parse_output
from bubblelab.engine.loader import load_model
from bubblelab.engine.model_runner import sampling_variant
from bubblelab.engine.sampler import SamplingFlags
from bubblelab.engine.sampling_params import SamplingParams
from tests.engine_helpers import Req, make_engine, run_script


def test_sampling_variants_with_graphs():
    greedy, sampled, top_k, top_p = (
        SamplingFlags(True, False, False, 0),
        SamplingFlags(False, False, False, 0),
        SamplingFlags(False, True, False, 5),
        SamplingFlags(False, False, True, 0),
    )
    assert sampling_variant(greedy, False) == (True, False)
    assert sampling_variant(sampled, True) == (False, True)
    assert (
        sampling_variant(top_k, False) is None and sampling_variant(top_p, True) is None
    )  # sampled eagerly


def _requests(vocab_size: int) -> list[Req]:
    g = torch.Generator().manual_seed(3)
    kinds: list[dict[str, Any]] = [
        dict(),
        dict(temperature=0.8, seed=11),
        dict(temperature=1.0, seed=5, constraint="detect"),
        dict(temperature=0.0, constraint="point"),
        dict(temperature=1.0, top_k=20, seed=2),
    ]
    reqs = []
    for i in range(10):  # 10 rows: buckets 1..16 see padded rows
        prompt = torch.randint(
            3, vocab_size, (int(torch.randint(3, 20, (1,), generator=g)),), generator=g
        )
        params = SamplingParams(max_tokens=20 + i, ignore_eos=True, **kinds[i % len(kinds)])
        reqs.append(Req(f"r{i}", prompt.tolist(), params, arrive_tick=i // 3))
    return reqs


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("depth", [1, 2])
def test_graph_sampling_matches_eager(depth):
    """Same decode graphs in both engines, so only sampling differs (near-tie greedy tokens of
    random weights would make a graph-vs-eager forward comparison flaky); sampling is
    batch-invariant, so equality is exact."""
    loaded = load_model(
        "tiny-llama", dtype="bf16", device="cuda", attention_backend="torch", seed=7
    )
    cfg = loaded.config
    reqs = _requests(cfg.vocab_size)
    outcomes, replays = {}, {}
    for graphs in (False, True):
        engine = make_engine(
            loaded, device="cuda", depth=depth, block_size=16, num_kv_blocks=64, max_num_seqs=16
        )
        assert (
            sum(len(g) for g in engine.runner.graphs.sample_graphs)
            == 2 * len(engine.runner.graphs.buckets) * 4
        )
        if not graphs:
            engine.runner.graphs.sample_graphs = [
                {} for _ in engine.runner.slots
            ]  # every step samples eagerly
        outcomes[graphs] = run_script(engine, reqs)
        replays[graphs] = engine.runner.graphs.sample_replays
        engine.close()
    assert (
        replays[False] == 0 and replays[True] > 0
    )  # top-k steps fall back to eager sampling, the rest replay
    assert outcomes[True].tokens == outcomes[False].tokens
    for r in reqs:
        if r.params.constraint is not None:
            parse_output(
                r.params.constraint,
                outcomes[True].tokens[r.rid],
                vocab_size=cfg.vocab_size,
                eos_token_ids=cfg.eos_token_ids,
            )
