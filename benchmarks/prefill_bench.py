"""Prefill micro-benchmark: host time to enqueue one prefill and its GPU time, per-sequence loop vs varlen.

Per preset (bf16, seeded random weights), a prefill of 1, 8, 32 and 128 sequences of --tokens tokens runs the
way ModelRunner._prefill_body runs it: paged KV cache bound (K/V stored), fused ops compiled as the engine sets
them, logits of each sequence's last token. Prefill attention paths (engine.attention.prefill.set_impl):
  loop          the old one SDPA per sequence per layer
  varlen        "auto": aten flash varlen, one call per layer (falls back to varlen_attn, then the loop)
  varlen_attn   torch.nn.attention.varlen.varlen_attn, the public wrapper of the same kernel
  varlen-eager  varlen with the fused ops eager: what torch.compile's per-call overhead costs the host
host_ms: perf_counter around the enqueue, started on a drained queue; gpu_ms: CUDA events around the same
work (its span, idle gaps included). Median of --repeats after --warmup. Also the largest relative logits
difference to the loop. Prints a table, writes JSON to --out.

    python benchmarks/prefill_bench.py --out prefill_bench.json                         # H200: < 90 s
    python benchmarks/prefill_bench.py --device cpu --presets tiny-qwen3 --out x.json   # CPU smoke run
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from the repo root

from bubblelab.engine.attention import prefill  # noqa: E402
from bubblelab.engine.attention.metadata import AttentionMetadata  # noqa: E402
from bubblelab.engine.loader import load_model  # noqa: E402

BLOCK_SIZE = 16
# (name, prefill impl, compiled fused ops)
PATHS = [
    ("loop", "loop", True),
    ("varlen", "auto", True),
    ("varlen_attn", "varlen_attn", True),
    ("varlen-eager", "auto", False),
]


class Timer:
    """Host ms around the enqueue and device ms between events (perf_counter after a sync on CPU)."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        if self.cuda:
            self.start, self.end = (
                torch.cuda.Event(enable_timing=True),
                torch.cuda.Event(enable_timing=True),
            )

    def run(self, fn) -> tuple[float, float]:
        self.sync()
        t0 = time.perf_counter()
        if self.cuda:
            self.start.record()
        fn()
        if self.cuda:
            self.end.record()
        host = (time.perf_counter() - t0) * 1e3
        self.sync()
        device = (
            self.start.elapsed_time(self.end) if self.cuda else (time.perf_counter() - t0) * 1e3
        )
        return host, device

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()


def prefill_inputs(n_seqs: int, tokens: int, vocab: int, device: torch.device) -> dict:
    """Flat prefill batch: sequence i owns pages [i * pages, (i + 1) * pages) of the KV pool."""
    g = torch.Generator().manual_seed(n_seqs)
    lens = [tokens] * n_seqs
    pages = -(-tokens // BLOCK_SIZE)
    pos = torch.arange(tokens).repeat(n_seqs)
    seq = torch.arange(n_seqs).repeat_interleave(tokens)
    meta = AttentionMetadata.for_prompts(lens, device)
    meta.slot_mapping = ((seq * pages + pos // BLOCK_SIZE) * BLOCK_SIZE + pos % BLOCK_SIZE).to(
        device
    )
    return {
        "ids": torch.randint(0, vocab, (n_seqs * tokens,), generator=g).to(device),
        "pos": pos.to(device),
        "last": (meta.cu_seqlens[1:] - 1).long(),
        "meta": meta,
        "pages": n_seqs * pages,
    }


def bench_preset(preset: str, args, device: torch.device) -> list[dict]:
    t0 = time.perf_counter()
    dtype = "bf16" if device.type == "cuda" else "fp32"
    loaded = load_model(preset, dtype=dtype, device=str(device), seed=0, attention_backend="torch")
    model, cfg = loaded.model, loaded.config
    max_pages = max(b * -(-args.tokens // BLOCK_SIZE) for b in args.batches)
    shape = (max_pages, BLOCK_SIZE, cfg.num_kv_heads, cfg.head_dim)
    param_dtype = next(model.parameters()).dtype
    model.bind_kv_cache(
        [torch.zeros(shape, dtype=param_dtype, device=device) for _ in range(cfg.num_layers)],
        [torch.zeros(shape, dtype=param_dtype, device=device) for _ in range(cfg.num_layers)],
    )
    timer = Timer(device)
    compile_default = device.type == "cuda"  # what the engine does (EngineConfig.compile=None)
    rows = []
    with torch.inference_mode():
        inputs = {b: prefill_inputs(b, args.tokens, cfg.vocab_size, device) for b in args.batches}

        def step(x: dict) -> torch.Tensor:  # ModelRunner._prefill_body without the slot's buffers
            x["meta"].step_cache.clear()  # a fresh step's metadata: nothing derived yet
            hidden = model(x["ids"], x["pos"], x["meta"])
            return model.compute_logits(hidden[x["last"]])

        for (
            name,
            impl,
            compiled,
        ) in PATHS:  # warm-up (and compile) every path once before timing any
            model.set_compile(compiled and compile_default)
            prefill.set_impl(impl)
            step(inputs[args.batches[0]])
        timer.sync()
        print(f"{preset}: loaded and warmed up in {time.perf_counter() - t0:.1f} s", flush=True)
        for b in args.batches:
            reference = None
            for name, impl, compiled in PATHS:
                model.set_compile(compiled and compile_default)
                prefill.set_impl(impl)
                for _ in range(args.warmup):
                    step(inputs[b])
                times = [timer.run(lambda: step(inputs[b])) for _ in range(args.repeats)]
                logits = step(inputs[b]).float()
                reference = logits if reference is None else reference
                rows.append(
                    {
                        "preset": preset,
                        "seqs": b,
                        "tokens": args.tokens,
                        "path": name,
                        "host_ms": statistics.median(t[0] for t in times),
                        "gpu_ms": statistics.median(t[1] for t in times),
                        "host_ms_all": [t[0] for t in times],
                        "gpu_ms_all": [t[1] for t in times],
                        "rel_diff_vs_loop": float((logits - reference).norm() / reference.norm()),
                        "unusable_kernels": sorted(prefill._unusable),
                    }
                )
    model.set_compile(compile_default)
    prefill.set_impl("auto")
    del model, loaded, inputs
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return rows


def print_table(rows: list[dict]) -> None:
    loop = {(r["preset"], r["seqs"]): r for r in rows if r["path"] == "loop"}
    print(
        f"{'preset':<12} {'seqs':>5} {'path':<13} {'host ms':>9} {'gpu ms':>9} {'host x':>7} {'gpu x':>7} "
        f"{'rel diff':>9}"
    )
    for r in rows:
        base = loop[(r["preset"], r["seqs"])]
        print(
            f"{r['preset']:<12} {r['seqs']:>5} {r['path']:<13} {r['host_ms']:>9.2f} {r['gpu_ms']:>9.2f} "
            f"{base['host_ms'] / r['host_ms']:>7.2f} {base['gpu_ms'] / r['gpu_ms']:>7.2f} "
            f"{r['rel_diff_vs_loop']:>9.1e}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--presets", default="qwen3-0.6b,qwen3-4b")
    ap.add_argument(
        "--batches", default="1,8,32,128", help="sequences per prefill, comma-separated"
    )
    ap.add_argument("--tokens", type=int, default=32, help="tokens per sequence")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--out", required=True, help="JSON file to write")
    args = ap.parse_args()
    args.batches = [int(b) for b in args.batches.split(",")]
    device = torch.device(args.device)
    t0 = time.perf_counter()
    rows = []
    for preset in args.presets.split(","):
        rows += bench_preset(preset, args, device)
    print_table(rows)
    report = {
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "wall_s": time.perf_counter() - t0,
        "kernels_proven": sorted(prefill._proven),
        "kernels_unusable": sorted(prefill._unusable),
        "rows": rows,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1))
    print(f"wrote {args.out} ({report['wall_s']:.1f} s)")


if __name__ == "__main__":
    main()
