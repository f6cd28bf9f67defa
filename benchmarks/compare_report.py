"""The markdown table and the plot of benchmarks/compare_engines.py's result."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: the device machine has no display
import matplotlib.pyplot as plt  # noqa: E402

from bubblelab.core.files import write_atomic
from bubblelab.core.steady import WARMUP_STEPS  # noqa: E402


def write_markdown(result: dict, path: Path) -> str:
    """The comparison table, the floor table and what did not run, as markdown: written to `path`
    and returned."""
    sweep = result["sweep"]
    lines = [
        f"# Engines compared on {result['device']}",
        "",
        f"{sweep['dtype']}, seeded random weights; {sweep['prompt_len']}-token prompts, "
        f"mean output length {sweep['L']:g}; torch {result['torch']}, "
        f"transformers {result['transformers']}. Median over repeats, (min-max) spread. "
        f"bubblelab: closed loop of {sweep['requests_per_stream']} x streams requests, per-step "
        "numbers in steady-state decode; HF: one static batch of `streams` rows, step periods "
        f"from CUDA events at each step's logits (first {WARMUP_STEPS} decode steps skipped).",
        "",
        "| preset | streams | engine | attention | decode tok/s | step ms | forward ms | GPU busy "
        "| prefill ms | e2e tok/s | wall s |",
        "|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["summary"]:
        lines.append(
            f"| {r['preset']} | {r['streams']} | {r['engine']} | {r.get('attention') or '-'} | "
            f"{_spread(r, 'decode_tokens_per_s', 0)} | "
            f"{_spread(r, 'step_ms', 3)} | {_num(r['forward_ms'], 3)} | {_pct(r['gpu_busy'])} | "
            f"{_num(r['prefill_ms'], 1)} | {_num(r['e2e_tokens_per_s'], 0)} | "
            f"{_num(r['wall_s'], 2)} |"
        )
    lines += [
        "",
        f"Floor: weight bytes / device copy bandwidth "
        f"({_num(result['copy_bandwidth_gbs'], 0)} GB/s, read + write, measured in this run); "
        "achieved time at batch 1 over it (forward for every bubblelab engine and attention "
        "backend, whole step for HF).",
        "",
        "| preset | weight GB | floor ms | achieved / floor |",
        "|---|---:|---:|---|",
    ]
    for preset, f in result["floor"].items():
        ratios = ", ".join(
            f"{k.removesuffix('_over_floor')} {v:.2f}x"
            for k, v in f.items()
            if k.endswith("_floor")
        )
        gb, floor_ms = f"{f['weight_bytes'] / 1e9:.2f}", _num(f["floor_ms"], 3)
        lines.append(f"| {preset} | {gb} | {floor_ms} | {ratios or '-'} |")
    lines += ["", "Not run or failed:", ""] + [
        f"- {n['engine']}{' (' + n['preset'] + ')' if n['preset'] else ''}: {n['reason']}"
        for n in result["not_run"]
    ]
    text = "\n".join(lines) + "\n"
    write_atomic(path, text)
    return text


def plot(result: dict, path: Path) -> None:
    """Decode tokens/s against streams, one panel per preset, one line per engine (median, min-max
    bars)."""
    presets = list(dict.fromkeys(r["preset"] for r in result["summary"]))
    fig, axes = plt.subplots(
        1, max(1, len(presets)), figsize=(5.5 * max(1, len(presets)), 4.2), squeeze=False
    )
    for ax, preset in zip(axes[0], presets, strict=False):
        rows = [
            r
            for r in result["summary"]
            if r["preset"] == preset and r["decode_tokens_per_s"] is not None
        ]
        for engine in dict.fromkeys(r["engine"] for r in rows):
            mine = sorted((r for r in rows if r["engine"] == engine), key=lambda r: r["streams"])
            y = [r["decode_tokens_per_s"] for r in mine]
            err = [
                [v - r["decode_tokens_per_s_min"] for v, r in zip(y, mine, strict=True)],
                [r["decode_tokens_per_s_max"] - v for v, r in zip(y, mine, strict=True)],
            ]
            ax.errorbar(
                [r["streams"] for r in mine], y, yerr=err, marker="o", capsize=3, label=engine
            )
        ax.set(
            yscale="log",
            title=preset,
            xlabel="concurrent streams",
            ylabel="decode tokens/s (steady state)",
        )
        ax.set_xscale("log", base=2)
        streams = sorted({r["streams"] for r in rows})
        ax.set_xticks(streams, [str(s) for s in streams])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="small")
    fig.suptitle(f"Decode throughput on {result['device']}")
    fig.tight_layout()
    write_atomic(path, lambda partial: fig.savefig(partial, dpi=120))
    plt.close(fig)


def _num(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def _spread(row: dict, key: str, digits: int) -> str:
    if row[key] is None:
        return "-"
    return (
        f"{row[key]:,.{digits}f} ({row[key + '_min']:,.{digits}f}-{row[key + '_max']:,.{digits}f})"
    )
