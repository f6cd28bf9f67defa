"""The unprofiled pass's repeats: each configuration pair by pair, until the repeat rule stops it.

The plan lists each configuration's pairs up to the most allowed, depths in ABBA order
(costmodel.repeats.pair_order), with the rule beside them (plan["repeat_rule"]). The worker makes
the runs `plan_runs` hands it; after each pair, this reads the pair's records back (the worker
writes a run's record before it asks for the next run) and asks the rule whether the
configuration needs another. The rest of a stopped configuration is skipped, and its verdict is
written to RUN_DIR/repeats.json, where the sweep and the results file read it. Reading the
records, not counting runs made, is what lets a resumed sweep continue a configuration where it
stopped.

The pairs may be spread over several worker processes, one after another (the rule's
`processes`; plan["process"] numbers this one from 1), because the host's speed is drawn per
process (docs/measurements.md section 7): an earlier process makes each configuration's first
pairs up to its `quota`, and the last continues every configuration from the records until the
rule stops it, with each pair's process in the verdict.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ..core.files import write_atomic
from ..costmodel.repeats import RepeatRule, decide, describe, quota
from .record import find_record, read_record

VERDICTS = "repeats.json"


def plan_runs(plan: dict) -> Iterator[dict]:
    """The runs of a plan in the order to make them: all of them, or with a "repeat_rule" each
    configuration's pairs until the rule stops it."""
    if not plan.get("repeat_rule"):
        yield from plan["runs"]
        return
    rule = RepeatRule(**plan["repeat_rule"])
    process = int(plan.get("process", 1))
    last = process >= rule.processes  # earlier processes stop at their quota, with no verdict
    out_dir = Path(plan["out_dir"])
    verdicts: dict[str, dict] = {}
    for config, runs in itertools.groupby(plan["runs"], key=lambda r: r["config"]):
        made: list[dict] = []  # the configuration's run summaries so far
        verdict = None
        for pairs, (_, pair) in enumerate(itertools.groupby(runs, key=lambda r: r["repeat"]), 1):
            for run in pair:
                yield run
                made.append(_summary(out_dir, run))
            steps1, steps2 = _steps(made)
            verdict = decide(
                *_pairs(made), _seconds(made), rule, steps1, steps2, _processes(made), _idle(made)
            )
            if not verdict.more or pairs >= quota(rule, process):
                break
        if verdict is not None and last:
            verdicts[config] = {
                "config": config,
                "streams": made[0]["streams"],
                **verdict.record(),
                "runs": [s["tag"] for s in made],
            }
            write_atomic(out_dir / VERDICTS, json.dumps(verdicts, indent=1))


def quota_met(plan: dict, process: int) -> bool:
    """Every configuration already has the pairs an earlier process makes (resumed, it has
    nothing to do), or a verdict."""
    rule = RepeatRule(**plan["repeat_rule"])
    out_dir = Path(plan["out_dir"])
    stopped = {v["config"] for v in read_verdicts(out_dir)}
    for config, runs in itertools.groupby(plan["runs"], key=lambda r: r["config"]):
        pairs = [list(pair) for _, pair in itertools.groupby(runs, key=lambda r: r["repeat"])]
        whole = sum(all(find_record(out_dir, r["tag"]) for r in pair) for pair in pairs)
        if config not in stopped and whole < min(quota(rule, process), len(pairs)):
            return False
    return True


def verdict_lines(verdicts: list[dict]) -> list[str]:
    """One line a configuration for the console: its speedup, and whether it is known or why not."""
    return [f"{v['config']}: {describe(v)}" for v in verdicts]


def read_verdicts(run_dir: Path) -> list[dict]:
    """The verdicts a pass wrote (RUN_DIR/runs/<pass>/repeats.json), one per configuration."""
    path = run_dir / VERDICTS
    return list(json.loads(path.read_text()).values()) if path.is_file() else []


def needed(runs: list[dict], verdicts: list[dict]) -> list[dict]:
    """The runs of a pass still wanted: a configuration the rule has stopped needs only those it
    made."""
    made = {v["config"]: set(v["runs"]) for v in verdicts}
    return [r for r in runs if r.get("config") not in made or r["tag"] in made[r["config"]]]


def unneeded(pass_dir: Path) -> set[str]:
    """The tags of a pass's planned runs that the rule did not need (RUN_DIR/runs/<pass>/)."""
    plan = pass_dir / "plan.json"
    if not plan.is_file():
        return set()
    runs = json.loads(plan.read_text())["runs"]
    return {r["tag"] for r in runs} - {r["tag"] for r in needed(runs, read_verdicts(pass_dir))}


def _summary(out_dir: Path, run: dict) -> dict:
    summary = read_record(out_dir, run["tag"])["summary"]
    return {**summary, "tag": run["tag"]}


def _pairs(made: list[dict]) -> tuple[list[float], list[float], list[float], list[float]]:
    """Tokens and walls of depth 1 and of depth 2, pair by pair (made: whole pairs, in order)."""
    by_depth = {d: [s for s in made if s["depth"] == d] for d in (1, 2)}
    return (
        [s["generated_tokens"] for s in by_depth[1]],
        [s["wall_s"] for s in by_depth[1]],
        [s["generated_tokens"] for s in by_depth[2]],
        [s["wall_s"] for s in by_depth[2]],
    )


def _idle(made: list[dict]) -> list[float]:
    """Each depth-1 run's GPU idle share of its timed region (%; runs.region's host_share)."""
    return [100.0 * s.get("host_share", np.nan) for s in made if s["depth"] == 1]


def _processes(made: list[dict]) -> list[int]:
    """Each pair's worker process (1 for records from before processes were numbered)."""
    return [int(s.get("process", 1)) for s in made if s["depth"] == 1]


def _steps(made: list[dict]) -> tuple[list[float], list[float]]:
    """Each run's median steady step (ms; core.steady, as the prediction table reads it), depth 1's
    and depth 2's; runs recorded before the summary kept it give their median decode step."""

    def median(s: dict) -> float:
        return s.get("steady_step_ms_median", s.get("step_ms_median", np.nan))

    by_depth = {d: [median(s) for s in made if s["depth"] == d] for d in (1, 2)}
    return by_depth[1], by_depth[2]


def _seconds(made: list[dict]) -> float:
    """What the configuration's runs took: warm-up, profiler range and workload."""
    return sum(s["wall_s"] + s.get("warmup_s", 0.0) + s.get("profiler_s", 0.0) for s in made)
