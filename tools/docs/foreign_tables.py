"""docs/foreign-traces.md's generated blocks (tools/docs/generated.py registers them): the committed
foreign fixtures (traces/foreign/) as `bubblelab analyze` reads them, nano-vllm against the
write-up's figures, and the two findings (nano-vllm-fork's syncs, transformers generate's steps).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pandas as pd

from bubblelab.profiling import analysis, foreign
from bubblelab.profiling.catalog import connect
from bubblelab.profiling.steps import StepOptions
from bubblelab.runs.analysis import analyze_traces

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "traces" / "foreign"
GPU_RUN = ROOT / "docs" / "measurements" / "2026-11-23"  # the untrimmed traces and their summary
# The write-up's figures (docs' source: the public post "Understanding LLM Inference Through
# Nano-vLLM", Qwen3-4B on an H100, torch.profiler's Chrome trace of the same workload)
WRITEUP = {"occupancy": 79.9, "step_us": 7095, "bubble_us": 909, "bubble_share": 53,
           "sub_us_share": 12, "wall_ms": 501, "traced_ms": 531}  # fmt: skip


@functools.cache
def fixture(name: str, gap_us: float = 5.0, path: Path | None = None) -> dict:
    """Everything the docs say about one trace: analyze's run summary with what pipelining would
    buy (L from the index), the per-step table, its steady steps and their idle gaps."""
    entry = json.loads((FIXTURES / "index.json").read_text())[f"{name}.sqlite.gz"]
    con = connect(None)
    (report,) = analyze_traces(
        [path or FIXTURES / f"{name}.sqlite.gz"],
        catalog=con,
        steps=StepOptions(entry.get("step_range"), gap_threshold_us=gap_us),
        output_len=entry["mean_generated_len"],
    )["runs"]
    steps = analysis.per_step(con, report["run_id"])
    steady = analysis.steady_state(steps)
    return {
        "entry": entry,
        "report": report,
        "steps": steps,
        "steady": steady,
        "gaps": analysis.idle_gaps(con, report["run_id"], steady),
        "gain": report["pipelining"],
    }


def busy_pct(steps: pd.DataFrame) -> float:
    """GPU busy as a share of the steps' periods (the write-up's "GPU occupancy"), percent."""
    timed = steps[steps.period_ms.notna()]
    return 100 * timed.busy_ms.sum() / timed.period_ms.sum()


def foreign_fixtures() -> str:
    """One row per fixture: how its steps were found and what analyze says about them."""
    index = json.loads((FIXTURES / "index.json").read_text())
    lines = [
        "| trace | engine · model | rule: steps (prefill-like) | period CV · sure | steady "
        "| period | GPU busy | bubble | host syncs a step: closing + extra "
        "| pipelining would buy |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key, entry in index.items():
        if "tensor_parallel" in entry:  # one engine over several GPUs: docs/tensor-parallel.md
            continue
        name = key.removesuffix(".sqlite.gz")
        f = fixture(name)
        r, found, gain = f["report"], f["report"]["steps_found"], f["gain"]
        syncs = r["syncs_per_step"]
        closing = sum(s["per_step"] for s in syncs if s["closing"] and s["event"] == "sync")
        extra = sum(s["per_step"] for s in syncs if s["flagged"] and s["event"] == "sync")
        model = entry["model"] if entry["model"] != "see workload" else "toy model"
        lines.append(
            f"| `{name}` | {entry['engine']} · {model} | {found['rule']}: {found['steps']} "
            f"({found['prefill_steps']}) | {found['period_cv']:.3f} · {found['confidence']} "
            f"| {r['steps']} | {r['period_ms']['median']:.3f} ms | {busy_pct(f['steady']):.1f}% "
            f"| {r['bubble_ms']['median']:.3f} ms | {closing:g} + {extra:g} "
            f"| {gain['speedup_pct']:+.1f}% ({gain['interval_pct'][0]:+.1f}% .. "
            f"{gain['interval_pct'][1]:+.1f}%) |"
        )
    return "\n".join(lines) + (
        "\n\nMedians over the steady steps (decode steps followed by a decode step, the first 5 "
        "left out); GPU busy = their busy time over their periods; bubble = idle gaps of 5 µs or "
        "more; host syncs: blocking calls a steady step (a `.tolist()` or `.item()` is one copy "
        "and one `cudaStreamSynchronize`; the copies are counted apart in `--json`), extra = "
        "flagged, mid-step; pipelining: costmodel/foreign.py with L = the index's mean "
        "generated length, 95% interval."
    )


def nanovllm_writeup() -> str:
    """The write-up's nano-vllm figures beside the same figures of the two nano-vllm fixtures."""
    peers = json.loads((GPU_RUN / "peers" / "compare_nanovllm.json").read_text())["summary"]
    plain = next(s for s in peers if s["case"] == "writeup" and s["engine"] == "nano-vllm")
    w = WRITEUP
    rows = [
        ("wall time (128 prompts, 64 tokens each)",
         f"{w['wall_ms']} ms unprofiled, {w['traced_ms']} ms traced"),
        ("decode step", f"{w['step_us']:,} µs median"),
        ("GPU occupancy", f"{w['occupancy']}% of the traced run"),
        ("post-sampling bubble per decode step", f"{w['bubble_us']} µs"),
        ("its share of the GPU's idle time", f"{w['bubble_share']}%"),
        ("idle in sub-µs gaps between kernels", f"{w['sub_us_share']}%"),
    ]  # fmt: skip
    ours = [
        [f"{plain['wall_s'] * 1e3:.0f} ms unprofiled (median of {plain['repeats']} runs)"],
        [],
    ]
    columns = []
    for name in ("nanovllm-raw", "nanovllm-nvtx"):
        f, f1 = fixture(name), fixture(name, gap_us=1.0)
        steady, gaps, r = f["steady"], f["gaps"], f["report"]
        period = r["period_ms"]
        bubble = gaps[gaps.within.isna()].groupby("step").idle_us
        last = gaps.sort_values("start_ns").groupby("step").tail(1).idle_us.median()
        idle = (steady.period_ms - steady.busy_ms).sum()
        sub_us = foreign.idle_split(f1["gaps"], f1["steady"])["kernel_gaps_share"]
        columns.append(
            [
                f"{f['entry']['wall_s'] * 1e3:.0f} ms under nsys",
                f"{period['median'] * 1e3:,.0f} µs median period (p10-p90 "
                f"{period['p10'] * 1e3:,.0f}-{period['p90'] * 1e3:,.0f})",
                f"{busy_pct(steady):.1f}% of the steady decode steps, "
                f"{busy_pct(f['steps']):.1f}% with the prefill",
                f"{r['bubble_ms']['median'] * 1e3:,.0f} µs median: {last:.0f} µs after the "
                f"tokens' copy, {bubble.max().median():.0f} µs up to the graph's first kernel, "
                "the rest between the input copies",
                f"{100 * steady.bubble_ms.sum() / idle:.0f}%",
                f"{100 * sub_us:.0f}% (below 5 µs: "
                f"{100 * r['idle_split']['kernel_gaps_share']:.0f}%)",
            ]
        )
    lines = [
        "| figure | write-up (H100) | `nanovllm-raw` (H200) | `nanovllm-nvtx` (H200) |",
        "|---|---|---|---|",
    ]
    for i, (label, theirs) in enumerate(rows):
        extra = ours[i] if i < len(ours) else []
        raw = "; ".join([*extra, columns[0][i]])
        lines.append(f"| {label} | {theirs} | {raw} | {columns[1][i]} |")
    return "\n".join(lines)


def foreign_findings() -> str:
    """nano-vllm-fork's 129 waits a step; transformers generate's steps before and after the
    reading rule (the untrimmed trace of the GPU run)."""
    fork = fixture("nano-vllm-fork")
    found, syncs = fork["report"]["steps_found"], fork["report"]["syncs_per_step"]
    extra = next(s for s in syncs if s["flagged"] and s["event"] == "copy")
    wait = sum(s["host_ms_per_step"] for s in syncs if s["flagged"])
    full = fixture("hf-generate", path=GPU_RUN / "foreign" / "hf-generate.sqlite.gz")
    old = json.loads((GPU_RUN / "foreign" / "summary.json").read_text())["traces"]["hf-generate"]
    hf, hf_found = full["report"], full["report"]["steps_found"]
    return (
        f"**nano-vllm-fork**: {found['detail']}. Per steady step the sync inventory holds "
        f"{extra['per_step']:g} flagged `{extra['detail']}` copies, each followed by a "
        f"`cudaStreamSynchronize`, all after `{extra['after'][:40]}…` (the LM head), and the "
        f"closing pair; the host sits {wait:.2f} ms a step in the extra ones (period "
        f"{fork['report']['period_ms']['median']:.2f} ms, GPU busy "
        f"{busy_pct(fork['steady']):.1f}%).\n\n"
        f"**transformers generate** (the whole export, {GPU_RUN.name}/foreign/): its first "
        f"analysis (summary.json) found {old['steps_found']['steps']} steps, period CV "
        f"{old['steps_found']['period_cv']:.2f}, confidence {old['steps_found']['confidence']}; "
        f"the current rules: {hf_found['steps']} steps ({hf_found['detail']}), CV "
        f"{hf_found['period_cv']:.3f}, {hf_found['confidence']}; {hf['steps']} steady steps of "
        f"{hf['period_ms']['median']:.1f} ms, GPU busy {busy_pct(full['steady']):.1f}%."
    )
