"""Graph vs eager greedy tokens in bf16: a bug, or ties that bf16 rounding breaks either way?

For each prompt of the GPU acceptance test (tests/test_engine_acceptance.py, 8 prompts of seeded
random ids) it takes the first generated token from the engine with CUDA graphs and without, and
compares both with the prompt's next-token logits from a plain forward in bf16 and in fp32 on the
same (bf16-rounded) weights (testing/greedy_ties.py). A graph/eager difference where the fp32 top-2
margin is below the bf16 logit error is a tie that rounding decides; one where the margin is large
is a bug in what the graphs compute.

    python -m benchmarks.greedy_margins --model qwen3-4b --out margins.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch

from bubblelab.core.files import write_atomic
from bubblelab.core.timeline import Timeline
from bubblelab.engine.config import EngineConfig
from bubblelab.engine.llm_engine import LLMEngine
from bubblelab.engine.loader import LoadedModel, load_model
from bubblelab.engine.sampling_params import SamplingParams
from testing.greedy_ties import fp32_logits, greedy_prompts, next_logits


def first_tokens(loaded: LoadedModel, eager: bool, ids: list[list[int]]) -> list[int]:
    config = EngineConfig(
        model=loaded.name, device="cuda", dtype="bf16", depth=2, max_num_seqs=32,
        max_model_len=256, enforce_eager=eager,
    )  # fmt: skip
    engine = LLMEngine(config, loaded, timeline=Timeline())
    for i, p in enumerate(ids):
        engine.add_request(f"g{i}", p, SamplingParams(max_tokens=1, ignore_eos=True))
    out: dict[str, int] = {}
    while engine.has_unfinished():
        for o in engine.step():
            if o.finished:
                out[o.request_id] = o.token_ids[0]
    engine.close()
    return [out[f"g{i}"] for i in range(len(ids))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen3-4b")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    loaded = load_model(args.model, dtype="bf16", device="cuda", seed=0)
    ids = greedy_prompts(loaded.config.vocab_size)
    graph, eager = first_tokens(loaded, False, ids), first_tokens(loaded, True, ids)
    bf16 = [next_logits(loaded, p) for p in ids]
    fp32 = fp32_logits(loaded, ids)
    rows: list[dict[str, Any]] = []
    for i, (g, e, lb, lf) in enumerate(zip(graph, eager, bf16, fp32, strict=True)):
        top = torch.topk(lf, 5)
        noise = float((lb - lf).abs().max())
        rows.append(
            {
                "prompt": i,
                "graph": g,
                "eager": e,
                "fp32_top5": top.indices.tolist(),
                "fp32_top5_logits": [round(float(v), 4) for v in top.values],
                "fp32_margin": float(top.values[0] - top.values[1]),
                "bf16_max_abs_error": noise,
                "graph_gap_to_max": float(lf.max() - lf[g]),
                "eager_gap_to_max": float(lf.max() - lf[e]),
                "logit_scale": float(lf.std()),
            }
        )
    doc = {"model": args.model, "gpu": torch.cuda.get_device_name(), "rows": rows}
    write_atomic(args.out, json.dumps(doc, indent=1))
    for r in rows:
        print(
            f"prompt {r['prompt']}: graph {r['graph']} eager {r['eager']}"
            f" fp32 top {r['fp32_top5'][:2]}"
            f" margin {r['fp32_margin']:.4f} bf16 error {r['bf16_max_abs_error']:.4f}"
            f" gaps graph {r['graph_gap_to_max']:.4f} eager {r['eager_gap_to_max']:.4f}"
        )


if __name__ == "__main__":
    main()
