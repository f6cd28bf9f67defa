"""The numbers in the docs, generated from the data they describe.

    .venv/bin/python -m tools.docs.generated           # rewrite every block in place
    .venv/bin/python -m tools.docs.generated --check   # exit 1 if a block is stale

A block is the text between two comments in a markdown file:

    <!-- generated: NAME (python -m tools.docs.generated) -->
    ...
    <!-- end generated -->

and NAME is a function below that renders it from committed data (the traces, the measurement
JSON). tests/test_docs_numbers.py fails when a committed block differs from its rendering, so a
replaced trace or a new measurement cannot leave the prose behind.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from bubblelab.costmodel.compare import step_summary
from bubblelab.costmodel.headline import accuracy_cells
from bubblelab.costmodel.predict import predict_runs
from bubblelab.profiling import overview
from bubblelab.profiling.catalog import connect
from bubblelab.runs.rundir import Results, read_results
from bubblelab.runs.traces import TRACES_DIR, load_traces
from tools.docs import engine_speed, foreign_tables, measurements_index, tp_tables

ROOT = Path(__file__).resolve().parents[2]
FILES = (
    "README.md",
    "traces/README.md",
    "costmodel/README.md",
    "docs/foreign-traces.md",
    "docs/measurements/README.md",
    "docs/tensor-parallel.md",
    "docs/engine-speed.md",
)
BLOCK = re.compile(
    r"(<!-- generated: (?P<name>[\w-]+) \(python -m tools\.docs\.generated\) -->\n)"
    r"(?P<body>.*?)"
    r"(<!-- end generated -->)",
    re.S,
)
ENGINES = ROOT / "docs" / "measurements" / "compare-engines" / "compare_engines.json"


@functools.cache
def committed_traces() -> tuple[Results, dict]:
    """The committed traces and profiling.overview.analyze's answer on them."""
    con = connect(None)
    results = load_traces(catalog=con)
    return results, overview.analyze(con, list(results.runs["run_id"]))


def _trace_names() -> dict[str, str]:
    """run_id -> trace name (without .sqlite.gz), in index.json's order."""
    index = json.loads((TRACES_DIR / "index.json").read_text())
    results, _ = committed_traces()
    return {
        run_id: name.removesuffix(".gz").removesuffix(".sqlite")
        for run_id, name in zip(results.runs["run_id"], index, strict=True)
    }


def h200_engines() -> str:
    """README: depth 1 against depth 2 of bubblelab (Triton attention) in compare_engines.json."""
    doc = json.loads(ENGINES.read_text())
    rows = pd.DataFrame(doc["summary"])
    rows = rows[rows["engine"].isin(["bubblelab-d1", "bubblelab-d2"])]
    lines = [
        "| preset · streams | depth 1 step | depth 2 step | GPU busy d1 → d2 "
        "| decode tokens/s win |",
        "|---|---|---|---|---|",
    ]
    for (preset, streams), g in rows.groupby(["preset", "streams"], sort=True):
        d1, d2 = (g[g["engine"] == f"bubblelab-d{d}"].iloc[0] for d in (1, 2))
        win = d2["decode_tokens_per_s"] / d1["decode_tokens_per_s"] - 1
        lines.append(
            f"| {preset} · {streams} | {d1['step_ms']:.3f} ms | {d2['step_ms']:.3f} ms "
            f"| {d1['gpu_busy']:.0%} → {d2['gpu_busy']:.0%} | {win:+.1%} |"
        )
    return "\n".join(lines)


def traces_steady_state() -> str:
    """traces/README.md: the steady-state medians of each committed engine trace."""
    _, report = committed_traces()
    names = _trace_names()
    lines = [
        "| trace | steady steps | forward | sampling | bubble | kernel gap | period |",
        "|---|---|---|---|---|---|---|",
    ]
    for run in report["runs"]:
        cells = [
            f"{run[f'{c}_ms']['median']:.3f}"
            for c in ("forward", "sampling", "bubble", "kernel_gap", "period")
        ]
        lines.append(f"| `{names[run['run_id']]}` | {run['steps']} | " + " | ".join(cells) + " |")
    late = {run["streams"]: run["host_late_share"] for run in report["runs"] if run["depth"] == 1}
    shares = " and ".join(
        f"{100 * share:.1f}% ({streams} stream{'s' if streams > 1 else ''})"
        for streams, share in sorted(late.items())
    )
    return "\n".join(lines) + (
        f"\n\nAt depth 1, {shares} of the bubble is the GPU waiting for the host to launch work "
        "(`host_late_share`); the rest, and all of the depth-2 bubble, are the few-µs hand-overs "
        "between the graph, the sampling kernels and the copies."
    )


def traces_nsys_inflation() -> str:
    """traces/README.md: each trace's steady period against the unprofiled one index.json names,
    and what that does to the per-step speedup."""
    _, report = committed_traces()
    names = _trace_names()
    index = json.loads((TRACES_DIR / "index.json").read_text())
    lines = [
        "| trace | period under nsys | unprofiled | nsys inflated it by |",
        "|---|---|---|---|",
    ]
    periods: dict[tuple[int, int], tuple[float, float]] = {}
    for run in report["runs"]:
        name = names[run["run_id"]]
        nsys = run["period_ms"]["median"]
        plain = index[f"{name}.sqlite.gz"]["nsys_inflation"]["unprofiled_ms"]["period"]
        periods[(run["streams"], run["depth"])] = (nsys, plain)
        lines.append(f"| `{name}` | {nsys:.3f} ms | {plain:.3f} ms | {nsys / plain - 1:+.1%} |")
    speedups = []
    for streams in sorted({s for s, _ in periods}):
        (n1, p1), (n2, p2) = periods[(streams, 1)], periods[(streams, 2)]
        where = f"{streams} stream{'s' if streams > 1 else ''}"
        speedups.append(f"{n1 / n2 - 1:+.1%} under nsys, {p1 / p2 - 1:+.1%} unprofiled at {where}")
    return "\n".join(lines) + (
        "\n\nSo the traces' per-step speedup is mostly the profiler's: "
        + "; ".join(speedups)
        + " (depth-1 period over depth-2 period)."
    )


def costmodel_depth1() -> str:
    """costmodel/README.md: what depth 1 tells about T_pipe, per committed trace."""
    results, _ = committed_traces()
    names = _trace_names()
    summary = step_summary(results.runs, results.steps)
    lines = [
        "| trace | period | kernels (union) | forward + sampling (spans) | kernel gaps "
        "| host tick (period − wait) |",
        "|---|---|---|---|---|---|",
    ]
    for r in summary.itertuples():
        lines.append(
            f"| `{names[r.run_id]}` | {r.period_ms:.3f} | {r.gpu_ms - r.kernel_gap_ms:.3f} "
            f"| {r.gpu_ms:.3f} | {r.kernel_gap_ms:.3f} | {r.host_tick_ms:.3f} |"
        )
    return "\n".join(lines) + "\n\nSteady-state medians, ms per step."


def costmodel_traces() -> str:
    """costmodel/README.md: the prediction table on the committed traces."""
    results, _ = committed_traces()
    table = predict_runs(results.runs, results.steps, results.requests)
    lines = [
        "| streams | T_block | T_pipe | z | predicted | from depth 1 "
        "| window: model / from depth 1 / measured | observed (runs) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in table.itertuples():
        lines.append(
            f"| {r.streams} | {r.blocking_ms:.2f} ms | {r.pipelined_ms:.2f} ms | {r.z:.2%} "
            f"| {r.predicted_pct:+.1f}% | {r.d1_predicted_pct:+.1f}% "
            f"(T_pipe {r.d1_pipelined_ms:.2f} ms) "
            f"| {r.wall_predicted_pct:+.1f}% / {r.wall_d1_predicted_pct:+.1f}% "
            f"/ {r.wall_observed_pct:+.1f}% | {r.observed_pct:+.1f}% |"
        )
    return "\n".join(lines)


COSTMODEL = ROOT / "docs" / "measurements" / "2026-11-23"
FROZEN = COSTMODEL / "costmodel-heldout" / "predictions-3f021e1.json"
HELDOUT_4 = ROOT / "docs" / "measurements" / "2026-11-27" / "heldout-4" / "rows.json"


def costmodel_headline() -> str:
    """README.md: the cost model on held-out and development sets, the forecast from depth 1 alone
    first (costmodel.headline.accuracy_cells). The fourth held-out set's rows are its table's
    (benchmarks.heldout_2_table, both GPUs); the first set's are the frozen predictions
    (tests/test_costmodel_heldout.py); the first set and the development set read the observed side
    with the statistic they were analysed with (issue #16's pooled pairs)."""
    fourth = pd.DataFrame(json.loads(HELDOUT_4.read_text())["rows"])
    frozen = pd.DataFrame(json.loads(FROZEN.read_text()))
    dev = []
    for path in sorted((COSTMODEL / "costmodel-dev").glob("dev-*.results.json.gz")):
        results = read_results(path)
        dev.append(predict_runs(results.runs, results.steps, results.requests, statistic="pooled"))
    rows = (
        (
            "held out, the fourth set (H100 and H200, each depth-1 run's own hand-over probe): "
            "8 configurations chosen, and the model frozen, before they ran; pairs until known "
            "or 35 s",
            fourth,
        ),
        ("held out, the first set (one H200, 5 pairs): 8 configurations, the same rule", frozen),
        (
            "development (one H200, 5 pairs): qwen3-0.6b and qwen3-4b, 1-128 streams",
            pd.concat(dev, ignore_index=True),
        ),
    )
    lines = [
        "| rows | forecast from depth 1 alone | observed known to ±1 point "
        "| explains (reads depth 2): the post's per-step model "
        "| explains (reads depth 2): whole run, depth 2's pieces |",
        "|---|---|---|---|---|",
    ]
    lines += [f"| {name} | {' | '.join(accuracy_cells(table))} |" for name, table in rows]
    return "\n".join(lines)


RENDERERS: dict[str, Callable[[], str]] = {
    "h200-engines": h200_engines,
    "nanovllm-peers": engine_speed.peers,
    "engine-split": engine_speed.engine_split,
    "decode-roofline": engine_speed.decode_roofline,
    "traces-steady-state": traces_steady_state,
    "traces-nsys-inflation": traces_nsys_inflation,
    "costmodel-depth1": costmodel_depth1,
    "costmodel-traces": costmodel_traces,
    "costmodel-headline": costmodel_headline,
    "foreign-fixtures": foreign_tables.foreign_fixtures,
    "foreign-nanovllm-writeup": foreign_tables.nanovllm_writeup,
    "foreign-findings": foreign_tables.foreign_findings,
    "measurements-index": measurements_index.measurements_index,
    "tp-study": tp_tables.tp_study,
    "tp-heldout": tp_tables.tp_heldout,
    "tp-readme": tp_tables.tp_readme,
}


def render(text: str) -> str:
    """text with every generated block rendered anew."""

    def block(match: re.Match) -> str:
        name = match["name"]
        if name not in RENDERERS:
            raise KeyError(f"no renderer for generated block {name!r}")
        return f"{match.group(1)}{RENDERERS[name]()}\n{match.group(4)}"

    return BLOCK.sub(block, text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a block is stale")
    args = parser.parse_args()
    stale = []
    for name in FILES:
        path = ROOT / name
        text = path.read_text()
        fresh = render(text)
        if fresh != text:
            stale.append(name)
            if not args.check:
                path.write_text(fresh)
    verb = "stale" if args.check else "rewritten"
    print(f"{verb}: {', '.join(stale)}" if stale else "every generated block is up to date")
    sys.exit(1 if args.check and stale else 0)


if __name__ == "__main__":
    main()
