"""Tile and launch shape of the Triton paged decode kernel: which (block_n, num_warps, num_stages)
reads the KV cache fastest at the batch sizes and contexts the engine meets.

qwen3-4b's attention shapes (32 heads, 8 KV heads, head_dim 128, 16-token pages, bf16); one CUDA
graph holds `--layers` calls, each on its own KV pool (so the cache does not sit in L2), replayed
`--iters` times; median replay time per call against the KV-read floor (K and V of every context
token at the measured copy bandwidth).

`--splits` also varies the split count (0: the kernel's own choice from shapes). That choice reads
the block table's width, which in the engine is the longest context it admits, not the row's:
`--table-tokens` sets that width (default: the context itself), so a one-row step at 512 tokens
in an engine sized for 4096 splits as the engine's does (16 spans, half of them empty).

    python -m benchmarks.decode_attention_tune --out $OUT/tune.json     # H100: ~1 minute
    python -m benchmarks.decode_attention_tune --batches 1 --contexts 110,512 --table-tokens 4096 \
        --splits 0,1,2,4,8 --block-n 64 --warps 4 --stages 2 --out $OUT/splits.json
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

import torch

from benchmarks.forward_kernels import copy_bandwidth, time_steps
from bubblelab.core.files import write_atomic
from bubblelab.engine.attention.triton_decode import default_num_splits, paged_decode_attention

HEADS, KV_HEADS, DIM, PAGE = 32, 8, 128, 16


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--batches", default="1,32,128")
    ap.add_argument("--contexts", default="82,512,2048", help="tokens per row")
    ap.add_argument("--block-n", default="16,32,64")
    ap.add_argument("--warps", default="2,4")
    ap.add_argument("--stages", default="1,2,3")
    ap.add_argument("--splits", default="0", help="split counts; 0: the kernel's own choice")
    ap.add_argument(
        "--table-tokens", type=int, default=0, help="block table width in tokens (0: the context)"
    )
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--iters", type=int, default=20)
    return ap.parse_args(argv)


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def make_layer(batch: int, context: int, table_tokens: int = 0):
    """One layer's q, KV pool, shuffled block tables (table_tokens wide; entries past the context
    hold page 0, never read, where the engine keeps a scratch page) and context lengths, on the
    GPU."""
    pages = -(-context // PAGE)
    width = max(pages, -(-table_tokens // PAGE))
    k = torch.randn(batch * pages + 1, PAGE, KV_HEADS, DIM, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    order = torch.randperm(batch * pages, device="cuda")
    tables = torch.zeros(batch, width, dtype=torch.int32, device="cuda")
    tables[:, :pages] = order.view(batch, pages).to(torch.int32)
    lens = torch.full((batch,), context, dtype=torch.int32, device="cuda")
    q = torch.randn(batch, HEADS, DIM, device="cuda", dtype=torch.bfloat16)
    return q, k, v, tables, lens


def time_config(layers: list, iters: int, **shape) -> float:
    """Median us per call over graph replays of one call per layer."""
    for q, k, v, t, n in layers:  # compile, and check it runs
        paged_decode_attention(q, k, v, t, n, DIM**-0.5, **shape)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for q, k, v, t, n in layers:
            paged_decode_attention(q, k, v, t, n, DIM**-0.5, **shape)
    return time_steps(graph.replay, iters, cuda=True) * 1e3 / len(layers)


def main(argv: list[str] | None = None) -> None:
    a = parse_args(argv)
    torch.manual_seed(0)
    bandwidth = copy_bandwidth("cuda")  # bytes/s, read + write
    assert bandwidth is not None
    rows = []
    for batch, context in itertools.product(ints(a.batches), ints(a.contexts)):
        layers = [make_layer(batch, context, a.table_tokens) for _ in range(a.layers)]
        floor_us = 1e6 * 2 * batch * context * KV_HEADS * DIM * 2 / bandwidth
        width = layers[0][3].shape[1]  # the block table's pages
        for block_n, warps, stages, splits in itertools.product(
            ints(a.block_n), ints(a.warps), ints(a.stages), ints(a.splits)
        ):
            shape = {"block_n": block_n, "num_warps": warps, "num_stages": stages}
            # the kernel's own choice, computed as it computes it, so every row names its count
            shape["num_splits"] = splits or default_num_splits(
                batch, KV_HEADS, width, PAGE, torch.device("cuda"), block_n
            )
            try:
                us = time_config(layers, a.iters, **shape)
            except Exception as e:  # noqa: BLE001 -- a shape Triton cannot build is a row too
                rows.append({"batch": batch, "context": context, **shape, "error": str(e)[:200]})
                continue
            rows.append(
                {"batch": batch, "context": context, **shape, "us": us, "x_floor": us / floor_us}
            )
            print(json.dumps(rows[-1]), flush=True)
        del layers
        torch.cuda.empty_cache()
    facts = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "copy_bandwidth_gbs": bandwidth / 1e9,
        "rows": rows,
    }
    write_atomic(a.out, json.dumps(facts, indent=1))


if __name__ == "__main__":
    main()
