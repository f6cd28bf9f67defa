"""Repeats spread over worker processes (issue #25 item 2): the host's speed is drawn per process on
the GPU machines (docs/measurements.md section 7), so a speedup known within one process can be 3
points off in the next. The interval covers every process's median, processes that disagree stop a
configuration as not known, and a sweep's unprofiled pass runs its pairs in several workers, one
after another, each gated on the one before."""

from __future__ import annotations

import json
from dataclasses import asdict

import numpy as np
import pytest

from bubblelab.core.errors import BubblelabError
from bubblelab.costmodel.observed import median_of_pairs, process_medians
from bubblelab.costmodel.repeats import (
    DISAGREE,
    KNOWN,
    MAX_PAIRS,
    RepeatRule,
    decide,
    describe,
    quota,
    stop_words,
)
from bubblelab.runs import passes
from bubblelab.runs.record import load_record, records_in
from bubblelab.runs.repeats import VERDICTS, quota_met
from bubblelab.runs.sweep import SweepSpec

TOKENS = 1000


def verdict(ratios, processes, rule: RepeatRule):
    """decide() on pairs whose depth-2 wall is 1 s and depth 1's the ratio: each pair's speedup."""
    n = len(ratios)
    return decide([TOKENS] * n, list(ratios), [TOKENS] * n, [1.0] * n, 2.0 * n, rule,
                  processes=processes)  # fmt: skip


def test_the_interval_covers_every_process_median():
    # As on one H200 (2026-11-30): one process +5.3% over 9 steady pairs, the next ~3 points up.
    first = [1.046, 1.050, 1.052, 1.053, 1.053, 1.054, 1.055, 1.057, 1.075]
    second = [1.080, 1.084, 1.086, 1.088]
    alone = median_of_pairs(first)
    assert alone.known and alone.hi < 6.0  # within its own process: known to ±1 point
    both = median_of_pairs(first + second, [1] * 9 + [2] * 4)
    assert both.lo <= 5.3 and both.hi == pytest.approx(8.5) and not both.known  # the second's
    assert process_medians(first + second, [1] * 9 + [2] * 4) == pytest.approx({1: 1.053, 2: 1.085})
    # Unlabelled pairs (older records) are one process: nothing changes.
    assert median_of_pairs(first, [None] * 9) == alone == median_of_pairs(first, [1] * 9)
    with pytest.raises(ValueError, match="3 process labels for 9 pairs"):
        median_of_pairs(first, [1, 1, 2])


def test_processes_that_disagree_stop_the_configuration_not_known():
    rule = RepeatRule(budget_s=1e4, min_pairs=3, max_pairs=20, processes=2)
    ratios, labels = [1.050, 1.052], [1, 1]
    for r in (1.086, 1.084):  # the second process: +8.5%, each pair steady
        v = verdict(ratios := ratios + [r], labels := labels + [2], rule)
    assert v.stop == DISAGREE and not v.more and not v.observed.known
    assert v.process_pcts == pytest.approx((5.1, 8.5))
    assert stop_words(v.record()) == "processes disagree (+5.1%, +8.5%)"
    assert "not known: processes disagree" in describe(v.record())
    # One pair of the last process is not yet a disagreement; and --spend-budget spends it.
    assert verdict(ratios[:3], labels[:3], rule).more
    assert verdict(ratios, labels, RepeatRule(1e4, 3, 20, out_of_reach=False, processes=2)).more


def test_processes_that_agree_make_it_known_over_both():
    rng = np.random.default_rng(3)
    ratios = list(1.10 + 0.002 * rng.standard_normal(8))
    v = verdict(ratios, [1, 1, 2, 2, 2, 2, 2, 2], RepeatRule(1e4, 3, 20, processes=2))
    assert v.stop == KNOWN and len(v.process_pcts) == 2
    assert stop_words(v.record()) == "known to ±1 point over 2 processes"
    one = verdict(ratios, None, RepeatRule(1e4, 3, 20))
    assert stop_words(one.record()) == "known to ±1 point in this process"
    # Known at the host speed it was measured at: depth 1's bubble is host time (2026-11-30, one
    # H200: a configuration known at +7.0% with depth 1's GPU idle 6.7-8.7% measured +8.1 to
    # +13.5% a minute later with 8.0-12.5%).
    n = len(ratios)
    at = decide([TOKENS] * n, ratios, [TOKENS] * n, [1.0] * n, 2.0 * n, RepeatRule(1e4, 3, 20),
                idle1=[6.7, 8.7, np.nan, 7.0, 7.1, 7.2, 7.3, 7.4])  # fmt: skip
    assert at.idle_d1_pct == (6.7, 8.7)
    assert stop_words(at.record()).endswith("in this process, depth 1's GPU idle 6.7-8.7%")


def test_earlier_processes_share_the_minimum_pairs():
    assert quota(RepeatRule(min_pairs=3, processes=2), 1) == 2
    assert [quota(RepeatRule(min_pairs=3, processes=3), p) for p in (1, 2)] == [1, 2]
    assert quota(RepeatRule(min_pairs=1, processes=3), 2) == 2  # at least a pair each
    assert quota(RepeatRule(max_pairs=7, processes=2), 2) == 7  # the last: until the rule stops
    with pytest.raises(Exception, match="processes"):
        RepeatRule(processes=0)
    with pytest.raises(Exception, match="processes"):
        SweepSpec(processes=17)
    # On the CPU the unprofiled pass runs in this process: 1 by default, more refused, not ignored.
    assert SweepSpec().processes == 1
    with pytest.raises(BubblelabError, match="a CPU sweep runs its unprofiled pairs in this"):
        SweepSpec(processes=3)


def test_two_workers_make_one_configurations_pairs_one_after_the_other(tmp_path):
    """The first worker makes each configuration's first 2 pairs and stops; the second, gated on
    it, continues from the records to the rule's end and writes the verdict, with each pair's
    process; each run is told to the progress callback once, by the worker that made it."""
    spec = SweepSpec(model="tiny-llama", streams=[2], output_len_mean=4, requests_per_stream=2,
                     prompt_len=4, repeats=4, min_repeats=3)  # fmt: skip
    out = tmp_path / "sweep"
    rule = RepeatRule(budget_s=1e4, min_pairs=3, max_pairs=4, out_of_reach=False, processes=2)
    plan = dict(engine=spec.engine(), runs=spec.runs(), out_dir=str(out / "runs" / "plain"),
                profile=False, repeat_rule=asdict(rule))  # fmt: skip
    tags = [r["tag"] for r in plan["runs"]]
    first = passes.launch("plain", plan, out, tags, None, process=1)
    second = passes.launch("plain", plan, out, tags, first, process=2)
    seen: list[tuple[int, str]] = []
    timed = [
        passes.finish(p, lambda tag, _, p=p: seen.append((p.process, tag))) for p in (first, second)
    ]
    assert second.name == "plain.2" and all(t["wall_s"] > 0 for t in timed)

    made = {r.name.removesuffix(".json.gz"): load_record(r)["summary"]["process"]
            for r in records_in(out / "runs" / "plain")}  # fmt: skip
    assert made == {t: 1 if t.endswith(("r0", "r1")) else 2 for t in tags}
    assert seen == [(made[t], t) for t in tags]

    # Each worker's own files where the next gate looks for them; none reads as a record.
    home = out / "runs" / "plain"
    one, two = (json.loads((d / "worker.json").read_text()) for d in (home, home / "process.2"))
    assert one["ended_unix"] <= two["runs_started_unix"] and two["wait_gpu_s"] > 0
    assert json.loads((home / "process.2" / "plan.json").read_text())["process"] == 2

    (v,) = json.loads((home / VERDICTS).read_text()).values()
    assert v["stop"] == MAX_PAIRS and v["pairs"] == 4 and len(v["process_pcts"]) == 2
    assert v["runs"] == tags and len(v["idle_d1_pct"]) == 2  # the CPU runs' idle too
    assert quota_met(plan, 1)  # resumed, the first worker has nothing to do
