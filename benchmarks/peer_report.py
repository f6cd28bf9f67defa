"""The summary, the markdown tables and the plot of benchmarks/compare_nanovllm.py's result."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np

from benchmarks.peer_workloads import WARMUP

matplotlib.use("Agg")  # headless: the device machine has no display
import matplotlib.pyplot as plt  # noqa: E402

from bubblelab.core.files import write_atomic

# speed-up over nano-vllm's median to report against, both engines on one GPU (issue #26): per
# part, and for the closed loop at one stream its own; at more streams, keep the lead
TARGETS = {
    "a": {"bubblelab-d1": 1.10, "bubblelab-d2": 1.30},
    "b": {"bubblelab-d1": 1.0, "bubblelab-d2": 1.0},
}
ONE_STREAM = {"bubblelab-d1": 1.0, "bubblelab-d2": 1.20}


def target(part: str, streams: int, engine: str) -> float | None:
    """The speed-up over nano-vllm that issue #26 asks of `engine` here, or None."""
    return (ONE_STREAM if part == "b" and streams == 1 else TARGETS[part]).get(engine)


def summarise(result: dict) -> list[dict]:
    """Per (case, engine), measured repeats only: median and spread of wall time and tokens/s,
    distance to the floor, and the speed-up over nano-vllm on as many GPUs: ratio of medians, and
    the per-repeat paired ratios (the engines ran back to back in each repeat)."""
    labels = result["nanovllm"]["labels"]
    runs = [r for r in result["runs"] if r["repeat"] != WARMUP and "error" not in r]
    keys = list(dict.fromkeys((r["case"], r["engine"]) for r in runs))
    rows = []
    for case, engine in keys:
        mine = [r for r in runs if (r["case"], r["engine"]) == (case, engine)]
        wall = np.array([r["wall_s"] for r in mine])
        tps = np.array([r["tokens_per_s"] for r in mine])
        gpus = mine[0]["gpus"]
        nano = labels.get(str(gpus))
        row = {
            "part": mine[0]["part"],
            "case": case,
            "streams": mine[0]["streams"],
            "engine": engine,
            "gpus": gpus,
            "repeats": len(mine),
            "wall_s": float(np.median(wall)),
            "wall_s_min": float(wall.min()),
            "wall_s_max": float(wall.max()),
            "wall_s_iqr": [float(np.percentile(wall, 25)), float(np.percentile(wall, 75))],
            "tokens_per_s": float(np.median(tps)),
            "tokens_per_s_min": float(tps.min()),
            "tokens_per_s_max": float(tps.max()),
            "total_tokens_per_s": float(np.median([r["total_tokens_per_s"] for r in mine])),
            "floor_s": mine[0]["floor_s"],
            "over_floor": float(np.median(wall)) / mine[0]["floor_s"],
        }
        peer = {r["repeat"]: r["wall_s"] for r in runs if (r["case"], r["engine"]) == (case, nano)}
        paired = [peer[r["repeat"]] / r["wall_s"] for r in mine if r["repeat"] in peer]
        if paired and engine != nano:
            row["vs_nanovllm"] = float(np.median(list(peer.values()))) / row["wall_s"]
            row["vs_nanovllm_paired"] = [float(np.median(paired)), min(paired), max(paired)]
            wanted = target(row["part"], row["streams"], engine)
            if wanted is not None and gpus == 1:
                row["target"] = wanted
                row["target_met"] = row["vs_nanovllm"] >= wanted
        rows.append(row)
    return rows


def write_markdown(result: dict, path: Path) -> str:
    """Both parts' tables, the floor's numbers and what did not run; written to `path`, returned."""
    args, nano, roof = result["args"], result["nanovllm"], result["roofline"]
    commit = nano["commit"].split()[0][:12] if nano.get("commit") else "(not staged)"
    where = "GPU 0" if result["device"] != "cpu" else "the CPU"
    lines = [
        f"# bubblelab and nano-vllm on {result['device']}",
        "",
        f"{args['preset']} shapes, {result['dtype']}, seeded random weights, the same for every "
        f"engine. nano-vllm {commit} (GeeeekExplorer/nano-vllm; attention "
        f"{nano.get('attention') or '-'}); bubblelab attention {result['bubblelab_attention']}; "
        f"tensor parallel {', '.join(map(str, nano['tensor_parallel']))} for both, each engine "
        f"against nano-vllm on as many GPUs; torch {result['torch']}, "
        f"transformers {result['transformers']}. {args['repeats']} rounds after a warm-up round, "
        "engines interleaved (A B C A B C ...); median (min-max), interquartile range in the JSON. "
        "Wall time of the whole run, timed inside each engine's process; tok/s = generated "
        "tokens / wall time.",
        "",
        f"Floor: {roof['formula']}. Copy bandwidth {roof['copy_bandwidth'] / 1e9:,.0f} GB/s (read "
        f"+ write), matmul peak {roof['matmul_peak'] / 1e12:,.3g} TFLOP/s "
        f"({roof['matmul_dtype']}, {roof['matmul_n']}^3), both measured in this run on {where}. "
        "KV-cache reads, activations, decode compute and prefill memory traffic are left out: "
        "the floor is a lower bound.",
    ]
    summary = result["summary"]
    part_a = [r for r in summary if r["part"] == "a"]
    part_b = [r for r in summary if r["part"] == "b"]
    if part_a:
        c = result["cases"]["writeup"]
        lines += [
            "",
            f"## (a) The write-up's workload: {c['requests']} prompts of {c['prompt_len_min']}-"
            f"{c['prompt_len_max']} tokens ({c['prompt_tokens']:,} in all), "
            f"{c['output_tokens'] // c['requests']} tokens each, temperature {c['temperature']:g}",
            "",
            "| engine | GPUs | wall s | tok/s | tok/s, prompt + generated | floor s "
            "| wall / floor | vs nano-vllm (paired) | target |",
            "|---|---:|---:|---:|---:|---:|---:|---|---|",
        ]
        lines += [
            f"| {r['engine']} | {r['gpus']} | {_spread(r, 'wall_s', 3)} | "
            f"{_spread(r, 'tokens_per_s', 0)} | "
            f"{r['total_tokens_per_s']:,.0f} | {r['floor_s']:.3f} | {r['over_floor']:.2f}x | "
            f"{_vs(r)} | {_target(r)} |"
            for r in part_a
        ]
    if part_b:
        lines += [
            "",
            f"## (b) Decode at N streams: closed loop of {args['requests_per_stream']} x N "
            f"requests, {args['prompt_len']}-token prompts, output lengths uniform on [L/2, 3L/2], "
            f"L = {args['L']:g}, temperature {result['cases'][part_b[0]['case']]['temperature']:g}",
            "",
            "| streams | engine | GPUs | wall s | tok/s | floor s | wall / floor "
            "| vs nano-vllm (paired) | target |",
            "|---:|---|---:|---:|---:|---:|---:|---|---|",
        ]
        lines += [
            f"| {r['streams']} | {r['engine']} | {r['gpus']} | {_spread(r, 'wall_s', 3)} | "
            f"{_spread(r, 'tokens_per_s', 0)} | {r['floor_s']:.3f} | {r['over_floor']:.2f}x | "
            f"{_vs(r)} | {_target(r)} |"
            for r in sorted(part_b, key=lambda r: r["streams"])
        ]
    lines += ["", "Not run or failed:", ""] + [
        f"- {n['engine']}{' (' + n['preset'] + ')' if n['preset'] else ''}: {n['reason']}"
        for n in result["not_run"]
    ]
    if not result["not_run"]:
        lines.append("- nothing")
    text = "\n".join(lines) + "\n"
    write_atomic(path, text)
    return text


def plot(result: dict, path: Path) -> None:
    """(a): wall time per engine against the floor; (b): tokens/s against streams, floor dashed."""
    summary = result["summary"]
    fig, (ax_a, ax_b) = plt.subplots(1, 2, figsize=(11, 4.2))
    part_a = [r for r in summary if r["part"] == "a"]
    if part_a:
        x = range(len(part_a))
        err = [[r["wall_s"] - r["wall_s_min"] for r in part_a],
               [r["wall_s_max"] - r["wall_s"] for r in part_a]]  # fmt: skip
        ax_a.bar(x, [r["wall_s"] for r in part_a], yerr=err, capsize=4, color="tab:blue")
        for gpus in sorted({r["gpus"] for r in part_a}):
            floor = next(r["floor_s"] for r in part_a if r["gpus"] == gpus)
            ax_a.axhline(floor, ls="--" if gpus == 1 else ":", c="k",
                         label=f"roofline floor ({gpus} GPU{'s' if gpus > 1 else ''})")  # fmt: skip
        ax_a.set_xticks(list(x), [r["engine"] for r in part_a], rotation=15, fontsize="small")
        ax_a.set(ylabel="wall time, s (median, min-max)", title="(a) the write-up's workload")
        ax_a.legend(fontsize="small")
    part_b = [r for r in summary if r["part"] == "b"]
    for engine in dict.fromkeys(r["engine"] for r in part_b):
        mine = sorted((r for r in part_b if r["engine"] == engine), key=lambda r: r["streams"])
        y = [r["tokens_per_s"] for r in mine]
        err = [[v - r["tokens_per_s_min"] for v, r in zip(y, mine, strict=True)],
               [r["tokens_per_s_max"] - v for v, r in zip(y, mine, strict=True)]]  # fmt: skip
        ax_b.errorbar(
            [r["streams"] for r in mine], y, yerr=err, marker="o", capsize=3, label=engine
        )
    if part_b:
        floors = {r["streams"]: r for r in part_b if r["gpus"] == 1}
        streams = sorted(floors)
        cases = result["cases"]
        ax_b.plot(
            streams,
            [cases[floors[s]["case"]]["output_tokens"] / floors[s]["floor_s"] for s in streams],
            "k--",
            label="roofline floor (1 GPU)",
        )
        ax_b.set_xscale("log", base=2)
        ax_b.set_xticks(streams, [str(s) for s in streams])
        ax_b.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax_b.set(yscale="log", xlabel="streams in flight", ylabel="generated tokens/s (median)",
             title="(b) decode, closed loop")  # fmt: skip
    ax_b.grid(True, which="both", alpha=0.3)
    if part_b:
        ax_b.legend(fontsize="small")
    fig.suptitle(f"bubblelab and nano-vllm, {result['args']['preset']}, {result['device']}")
    fig.tight_layout()
    write_atomic(path, lambda partial: fig.savefig(partial, dpi=120))
    plt.close(fig)


def _spread(row: dict, key: str, digits: int) -> str:
    return (
        f"{row[key]:,.{digits}f} ({row[key + '_min']:,.{digits}f}-{row[key + '_max']:,.{digits}f})"
    )


def _vs(row: dict) -> str:
    if "vs_nanovllm" not in row:
        return "-"
    median, low, high = row["vs_nanovllm_paired"]
    return f"{row['vs_nanovllm']:.2f}x ({low:.2f}-{high:.2f})"


def _target(row: dict) -> str:
    if "target" not in row:
        return "-"
    return f">= {row['target']:.2f}x: {'met' if row['target_met'] else 'not met'}"
