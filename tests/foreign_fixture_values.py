"""The figures of each committed foreign fixture (traces/foreign/), two ways, in one shape:
`analysed` is what `bubblelab analyze` computes (profiling's SQL, costmodel/foreign.py), `brute`
the same from the raw rows in plain Python (tests/fixture_rows.py, tests/fixture_figures.py).
tests/test_foreign_fixtures.py pins the first and compares the two; tests/pin_foreign_fixtures.py
rewrites the pins; tools/docs/generated.py renders the docs' tables from `analysed`.
"""

from __future__ import annotations

import functools
import gzip
import json
import shutil
import statistics
import tempfile
from pathlib import Path

from bubblelab.costmodel.foreign import pipelining_gain
from bubblelab.profiling import analysis, foreign, overview
from bubblelab.profiling.catalog import connect
from bubblelab.profiling.ingest import ingest
from bubblelab.profiling.steps import StepOptions
from tests import fixture_figures as ff
from tests.fixture_rows import candidates, choose, sure
from tests.fixture_sqlite import engine_thread, load

FIXTURES = Path(__file__).resolve().parents[1] / "traces" / "foreign"
INDEX = json.loads((FIXTURES / "index.json").read_text())
# one process each; the traces of an engine split over GPUs (tensor_parallel) are TP_NAMES
NAMES = tuple(n.removesuffix(".sqlite.gz") for n, e in INDEX.items() if "tensor_parallel" not in e)
TP_NAMES = tuple(n.removesuffix(".sqlite.gz") for n, e in INDEX.items() if "tensor_parallel" in e)


def entry(name: str) -> dict:
    return INDEX[f"{name}.sqlite.gz"]


def plain(value):
    """numpy scalars to Python ones, in nested dicts and lists."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value.item() if hasattr(value, "item") else value


def r6(x: float | None) -> float | None:
    return None if x is None else round(float(x), 6)


@functools.cache
def analysed(name: str) -> dict:
    """What the analysis says about fixture `name` (its index entry's --step-range, if any; L =
    its mean generated length)."""
    e = entry(name)
    con = connect(None)
    run = ingest(
        FIXTURES / f"{name}.sqlite.gz", None, {}, steps=StepOptions(e.get("step_range")), con=con
    )
    report = overview.analyze(con, [run])["runs"][0]
    steps = analysis.per_step(con, run)
    steady = analysis.steady_state(steps)
    gaps = analysis.idle_gaps(con, run, steady)
    hist = analysis.idle_histogram(con, run, steady)
    found = report["steps_found"]
    gaps_launched = foreign.launch_handovers(con, run, steps)
    gain = pipelining_gain(steps, output_len=e["mean_generated_len"], launch_gaps=gaps_launched)
    attribution = report["attribution_ms_per_step"]
    return plain(
        {
            "run_id": run,
            **{k: found[k] for k in ("rule", "detail", "steps", "decode_steps", "prefill_steps")},
            "prefill": [int(s) for s in steps.step[steps.kind == "prefill"]],
            **{k: found[k] for k in ("period_cv", "gpu_coverage", "confidence")},
            "steady": [len(steady), int(steady.step.min()), int(steady.step.max())],
            "medians": {
                c: report[f"{c}_ms"]["median"]
                for c in ("period", "busy", "bubble", "kernel_gap", "forward")
            },
            "busy_pct": round(100 * steady.busy_ms.sum() / steady.period_ms.sum(), 3),
            "bubble_share": report["bubble_share"],
            "idle_split": report["idle_split"],
            "gaps": [len(gaps), int(gaps.within.notna().sum())],
            "histogram": [
                [int(r.lo_us), int(r.gaps), int(r.kernel_gaps)]
                for r in hist[hist.gaps > 0].itertuples()
            ],
            "host_late_share": report["host_late_share"],
            "began_in": attribution["began"]["phase"],
            "by_time": attribution["time"]["top_level"],
            "syncs_per_step": sorted(
                [
                    r["event"],
                    r["api"],
                    r["detail"],
                    r["closing"],
                    r["flagged"],
                    r6(r["per_step"]),
                    r["after"],
                    r["phase"],
                ]
                for r in report["syncs_per_step"]
            ),
            "flagged_syncs": report["flagged_syncs"],
            "pipelining": {
                k: gain[k]
                for k in ("speedup_pct", "interval_pct", "t_block_ms", "t_pipe_ms", "handover_ms")
            },
        }
    )


@functools.cache
def per_step_tables(name: str):
    """(the analysis' per-step table, its idle gaps of every timed step, the sync inventory, the
    launch gaps the hand-over is priced from)."""
    e = entry(name)
    con = connect(None)
    run = ingest(
        FIXTURES / f"{name}.sqlite.gz", None, {}, steps=StepOptions(e.get("step_range")), con=con
    )
    steps = analysis.per_step(con, run)
    timed = steps[steps.period_ms.notna()]
    gaps = analysis.idle_gaps(con, run, timed)
    return steps, gaps, analysis.sync_inventory(con, run), foreign.launch_handovers(con, run, steps)


@functools.cache
def brute_rows(name: str):
    """(rows, rule, windows, per-step rows, whether a cross-check holds) read from the fixture's
    raw SQLite rows."""
    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / f"{name}.sqlite"
        with gzip.open(FIXTURES / f"{name}.sqlite.gz") as src, plain.open("wb") as dst:
            shutil.copyfileobj(src, dst)
        rows = load(plain)
    step_range = entry(name).get("step_range")
    found = candidates(rows, step_range)
    chosen = choose(found, step_range)
    return rows, chosen.rule, chosen.windows, ff.per_step(rows, chosen.windows), sure(found, chosen)


@functools.cache
def brute(name: str) -> dict:
    """The figures of `analysed`, from the raw rows (no run id, no rule detail: words)."""
    rows, rule, windows, steps, checked = brute_rows(name)
    steady = ff.steady(steps)
    n = len(steady)
    periods = [s.period / 1e6 for s in steady]
    total = sum(o.end - o.start for o in rows.ops)
    inside = sum(s.op_ns for s in steps)
    cv = statistics.pstdev(periods) / statistics.mean(periods)
    coverage = inside / total
    high, medium = cv <= 0.15 and coverage >= 0.8 and checked, cv <= 0.5 and coverage >= 0.5
    gaps = [g for s in steady for g in s.gaps]
    bubbles = [(a, b) for a, b in gaps if b - a >= ff.GAP_NS]
    began, by_time, labels = ff.attribution(rows, bubbles)
    longest = sum(max((b - a for a, b in s.gaps if b - a >= ff.GAP_NS), default=0) for s in steady)
    kernel = sum(b - a for a, b in gaps if b - a < ff.GAP_NS)
    idle = sum(b - a for a, b in gaps)
    split = {
        "kernel_gaps": kernel,
        "longest_bubble": longest,
        "other_bubbles": idle - kernel - longest,
    }
    launch_of: dict[int, int] = {}
    for o in rows.ops:  # the earliest launch among the ops starting at each instant
        if o.call:
            launch_of[o.start] = min(launch_of.get(o.start, o.call.start), o.call.start)
    lagged = [(a, b) for a, b in bubbles if b in launch_of]
    late = sum(b - a for a, b in lagged if launch_of[b] > a) / sum(b - a for a, b in lagged)
    nvtx = ff.innermost(
        [
            (s, e, name_)
            for t, s, e, name_, kind in rows.ranges
            if t == engine_thread(rows) and kind == 59
        ]
    )

    def phase_of(t: int) -> str | None:
        return ff.label_at(nvtx, t, None)

    inventory = ff.inventory(rows, windows)
    syncs = ff.sync_summary(inventory, [s.step for s in steady], phase_of)

    def med(values: list[float]) -> float:
        return round(statistics.median(values), 6)

    return {
        "rule": rule,
        "steps": len(steps),
        "decode_steps": sum(s.kind == "decode" for s in steps),
        "prefill_steps": sum(s.kind == "prefill" for s in steps),
        "prefill": [s.step for s in steps if s.kind == "prefill"],
        "period_cv": r6(cv),
        "gpu_coverage": r6(coverage),
        "confidence": "high" if high else "medium" if medium else "low",
        "steady": [n, steady[0].step, steady[-1].step],
        "medians": {
            "period": med(periods),
            "busy": med([s.busy / 1e6 for s in steady]),
            "bubble": med([s.bubble / 1e6 for s in steady]),
            "kernel_gap": med([s.kernel_gap / 1e6 for s in steady]),
            "forward": med([(s.period - s.bubble) / 1e6 for s in steady]),
        },
        "busy_pct": round(100 * sum(s.busy for s in steady) / sum(s.period for s in steady), 3),
        "bubble_share": r6(sum(s.bubble for s in steady) / sum(s.period for s in steady)),
        "idle_split": {
            "idle_ms_per_step": r6(idle / 1e6 / n),
            **{f"{k}_ms_per_step": r6(v / 1e6 / n) for k, v in split.items()},
            **{f"{k}_share": r6(v / idle) for k, v in split.items()},
        },
        "gaps": [len(gaps), sum(b - a < ff.GAP_NS for a, b in gaps)],
        "histogram": [list(h) for h in ff.histogram(gaps)],
        "host_late_share": r6(late),
        "began_in": {k: r6(v / 1e6 / n) for k, v in began.items()},
        "by_time": {k: r6(v / 1e6 / n) for k, v in by_time.items()},
        "syncs_per_step": sorted(
            [ev, api, detail, closing, v["flagged"], r6(v["per_step"]), after, phase]
            for (ev, api, detail, closing, phase, after), v in syncs.items()
        ),
        "flagged_syncs": sum(r["flagged"] for r in inventory),
        "pipelining": ff.pipelining(
            steady,
            entry(name)["mean_generated_len"],
            ff.launch_gaps(rows, [s for s in steps if s.timed]),
        ),
    }
