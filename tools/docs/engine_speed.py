"""Generated blocks on the engine's speed: bubblelab against nano-vllm on each GPU (README), and
where the write-up workload's wall goes at each step of the speed work (docs/engine-speed.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
MEASUREMENTS = ROOT / "docs" / "measurements"
# (what ran, its compare_nanovllm JSON, the bubblelab commit): newest first
PEERS = [
    (
        "with the GEMM tables",
        MEASUREMENTS / "2026-11-26/peers-h100-0ba4df5/compare_nanovllm.json",
        "0ba4df5",
    ),
    (
        "with the GEMM tables, PDL and early release",
        MEASUREMENTS / "2026-12-01/peers-h200-54b9505/compare_nanovllm.json",
        "54b9505",
    ),
    ("before the speed work", MEASUREMENTS / "2026-11-23/peers/compare_nanovllm.json", "4fa3750"),
]
# (label, directory of benchmarks.engine_split's split.json), in the order the work went
SPLITS = [
    ("before (4c3c190)", MEASUREMENTS / "2026-11-26/engine-split/before-4c3c190"),
    (
        "fused chains, one-pass sampling (eb373f6)",
        MEASUREMENTS / "2026-11-26/engine-split/fused-eb373f6",
    ),
    (
        "+ decode tiles, Triton sampler (98a9a6e)",
        MEASUREMENTS / "2026-11-26/engine-split/final-98a9a6e",
    ),
    (
        "+ GEMM table (f26ccbd), **on an H200**",
        MEASUREMENTS / "2026-11-26/engine-split/h200-f26ccbd",
    ),
    (
        "+ PDL, early release (54b9505), **on an H200**",
        MEASUREMENTS / "2026-12-01/engine-split/h200-54b9505",
    ),
]
# benchmarks.forward_kernels runs, cuBLAS only (gemm0) and with the GPU's table (gemm1):
# (GPU, the commit that ran, file stem under forward-kernels/)
ROOFLINE = [
    ("H100", "eeff8c8", "h100-eeff8c8"),
    ("H200", "f26ccbd", "h200-f26ccbd"),
]


def peers_table(path: Path) -> list[str]:
    """One compare_nanovllm run as table rows: each workload's walls and the paired ratios."""
    doc = json.loads(path.read_text())
    rows = pd.DataFrame(doc["summary"])
    lines = [
        "| workload | nano-vllm | bubblelab depth 1 | bubblelab depth 2 | depth 2 / nano-vllm "
        "| depth 1 / nano-vllm | wall / floor: nano-vllm, depth 2 |",
        "|---|---|---|---|---|---|---|",
    ]
    for case, g in rows.groupby("case", sort=False):
        by = {r["engine"]: r for r in g.to_dict("records")}
        nano, d1, d2 = by["nano-vllm"], by["bubblelab-d1"], by["bubblelab-d2"]
        what = (
            "the write-up's: 128 prompts, 64 tokens"
            if case == "writeup"
            else f"closed loop, {nano['streams']} stream{'s' if nano['streams'] > 1 else ''}"
        )

        def wall(r: dict) -> str:
            return f"{r['wall_s']:.3f} s ({r['wall_s_min']:.3f}-{r['wall_s_max']:.3f})"

        def ratio(r: dict) -> str:
            lo, hi = r["vs_nanovllm_paired"][1:]  # the paired rounds' smallest and largest ratio
            return f"{r['vs_nanovllm']:.2f}x ({lo:.2f}-{hi:.2f})"

        lines.append(
            f"| {what} | {wall(nano)} | {wall(d1)} | {wall(d2)} | {ratio(d2)} | {ratio(d1)} "
            f"| {nano['over_floor']:.1f}x, {d2['over_floor']:.1f}x |"
        )
    return lines


def peers() -> str:
    """README: bubblelab against the original nano-vllm, one table per GPU and commit."""
    out: list[str] = []
    for when, path, commit in PEERS:
        doc = json.loads(path.read_text())
        nano = doc["nanovllm"]["commit"].split()[0][:7]
        out += [
            f"**{doc['device']}**, bubblelab {commit} ({when}); {doc['dtype']}, torch "
            f"{doc['torch']}; nano-vllm {nano}; {doc['summary'][0]['repeats']} interleaved rounds "
            f"after a warm-up, median (min-max); {path.relative_to(ROOT)}",
            "",
            *peers_table(path),
            "",
        ]
    return "\n".join(out).rstrip()


def _decode_per_step(split: dict, depth: str) -> dict[str, float]:
    """Depth's nsys round: decode GPU ms per step by class (elementwise and other together)."""
    classes = split["profiled"][depth]["kernel_classes"]
    out: dict[str, float] = {}
    for r in classes:
        if r["kind"] != "decode":
            continue
        key = "elementwise" if r["class"] in ("elementwise", "other") else r["class"]
        out[key] = out.get(key, 0.0) + (r["per_step_ms"] or 0.0)
    return out


def engine_split() -> str:
    """docs/engine-speed.md: the write-up workload's wall in parts at each step of the work."""
    lines = [
        "| engine | depth | wall ms | before 1st forward | prefill step | decode steps "
        "| decode bubble | last step | decode GPU ms a step: GEMM, attention, elementwise, "
        "sampling |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for label, folder in SPLITS:
        split = json.loads((folder / "split.json").read_text())
        for depth, s in split["unprofiled"].items():
            lo, hi = s["wall_ms_range"]
            k = _decode_per_step(split, depth)
            lines.append(
                f"| {label} | {depth} | {s['wall_ms']:.1f} ({lo:.1f}-{hi:.1f}) "
                f"| {s['before_first_forward_ms']:.1f} | {s['prefill']['period_ms']:.1f} "
                f"| {s['decode']['period_ms']:.1f} | {s['decode']['bubble_ms']:.1f} "
                f"| {s['last_step_ms']:.1f} | {k.get('gemm', 0):.2f}, {k.get('attention', 0):.2f}, "
                f"{k.get('elementwise', 0):.2f}, {k.get('sampling', 0):.2f} |"
            )
    return "\n".join(lines) + (
        "\n\n"
        "NVIDIA H100 80GB HBM3, except the rows marked H200 (NVIDIA H200). Wall and its parts: "
        "the in-process timeline, median of 5 interleaved rounds per depth (min-max of the "
        "wall); GPU ms a step: one nsys round per depth (`benchmarks.engine_split`). Each "
        "version ran in its own call on a freshly started machine, and the hosts differed (on "
        "one H100 the CUDA calls took ~1.7x as long as on another): compare depth 2 and the GPU "
        "times across versions, depth 1's bubble, which is host time, within a version. Before "
        "d0bc498 the time before the first forward also counted building the 128 requests."
    )


def decode_roofline() -> str:
    """docs/engine-speed.md: a decode step's forward against its floor, cuBLAS alone and with the
    GPU's GEMM table, for each GPU, model and batch."""
    lines = [
        "| GPU | model | rows | floor ms (weights + K/V) | cuBLAS ms | with the table ms "
        "| with the table / floor | / weight floor alone |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    notes = []
    for gpu, commit, stem in ROOFLINE:
        for preset in ("qwen3-4b", "qwen3-8b"):
            runs = {}
            for g in ("gemm0", "gemm1"):
                doc = json.loads(
                    (
                        MEASUREMENTS / f"2026-11-26/forward-kernels/{stem}-{preset}-{g}.json"
                    ).read_text()
                )
                runs[g] = doc["presets"][preset]["compiled"]
            base, tuned = runs["gemm0"], runs["gemm1"]
            for key in (k for k in tuned if k.startswith("batch_")):
                b, t = base[key], tuned[key]
                lines.append(
                    f"| {gpu} | {preset} | {key[6:]} | {t['floor_ms']:.3f} | {b['step_ms']:.3f} "
                    f"| {t['step_ms']:.3f} | {t['x_floor']:.2f}x "
                    f"| {t['step_ms'] / tuned['floor_ms']:.2f}x |"
                )
        notes.append(
            f"{gpu} at {commit} ({doc['device']}, copy bandwidth {doc['copy_bandwidth_gbs']} GB/s)"
        )
    return "\n".join(lines) + (
        "\n\n"
        + "; ".join(notes)
        + ". `python -m benchmarks.forward_kernels --presets P --modes compiled --batches 1,8,128 "
        "--attention-backend triton --iters 30`, once with BUBBLELAB_TRITON_GEMM=0 (cuBLAS) and "
        "once without; the decode graph of each bucket replayed, median of 30 steps; rows of 512 "
        "tokens of context. The floor is the bytes a step must read, the weights once and every "
        "row's K/V in every layer, at the GPU's device-to-device copy bandwidth. The two runs of a "
        "model ran one after the other in one call, not interleaved."
    )
