"""The rule the GPU acceptance test uses to tell a bf16 tie from a bug (testing/greedy_ties.py), on
the CPU with a tiny bf16 model: runs that agree have no divergence, one that picks the least likely
token is no tie, and the weights come back bit for bit after the fp32 forward."""

from __future__ import annotations

import torch

from bubblelab.engine.loader import load_model
from testing.greedy_ties import divergences, fp32_logits, greedy_prompts


def test_a_far_token_is_no_tie_and_the_weights_come_back_unchanged():
    loaded = load_model("tiny-llama", dtype="bf16", device="cpu", seed=0)
    before = [p.detach().clone() for p in loaded.model.parameters()]
    prompt = greedy_prompts(loaded.config.vocab_size, 1)[0]
    logits = fp32_logits(loaded, [prompt])[0]
    best, worst = int(logits.argmax()), int(logits.argmin())
    prompts = {"g0": prompt}
    assert divergences(loaded, prompts, {"g0": [best]}, {"g0": [best]}) == {}
    far = divergences(loaded, prompts, {"g0": [best, 1]}, {"g0": [worst, 1]})["g0"]
    assert far["position"] == 0 and not far["tie"] and far["fp32_gap"] > far["bf16_error"]
    assert all(
        p.dtype == torch.bfloat16 and torch.equal(p, b)
        for p, b in zip(loaded.model.parameters(), before, strict=True)
    )
