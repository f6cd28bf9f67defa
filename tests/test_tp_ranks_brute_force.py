"""The per-rank tables of two real two-GPU nsys traces checked against brute force over their raw
SQLite rows (tests/rank_brute_force.py: plain Python from the definitions profiling/sql/ states,
none of its SQL).

- ours: bubblelab's engine at tensor parallel 2 on two H100s (one process a GPU, our NVTX ranges,
  NCCL kernels), cut to steps 60-89: profiling.ranks.rank_steps and analyze_ranks.
- nano: the original nano-vllm at tensor parallel 2 on two H100s, read as a foreign trace of two
  processes (each its own steps, by its own rule) and lined up as `bubblelab analyze` does
  (overview.analyze's split_engines: ranks.split_rank_steps, then ranks.summary).

For each: every rank's row of every step of the side-by-side table (GPU spans, host phases,
forward, sampling, bubble, period, busy, compute and communication), the straggler and the skews
of every step, and the per-rank summary over rank 0's steady steps. Integer-ns quantities must
agree to the nanosecond, medians and quantiles within 1e-6 ms.

On nano the two rules cut a step at different points: rank 0's window opens with its inputs'
upload, rank 1's closes with the next step's. Its forward lag and GPU straggler (rank 1, ~1.4 ms)
measure those edges as much as the ranks (their graphs end within 1 us); the tests check the
figures as defined, and that `bubblelab analyze` does not show them for ranks cut by different
rules.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pandas as pd
import pytest

from bubblelab.core.steady import WARMUP_STEPS
from bubblelab.profiling import overview, ranks
from bubblelab.profiling.catalog import connect
from bubblelab.profiling.ingest import ingest_trace, plain_sqlite
from tests import rank_brute_force as bf
from tests import rank_brute_force_across as bfx
from tests.fixture_sqlite import load

ROOT = Path(__file__).parents[1]
OURS = ROOT / "docs/measurements/2026-11-26/tp-nsys/qwen3-0.6b-tp2-s8-d1-steps60-89.sqlite.gz"
NANO = ROOT / "traces/foreign/nanovllm-tp2.sqlite.gz"
TOL_MS = 1e-6
# per-step times of the side-by-side table, in ms (the brute force keeps them in ns)
MS = (
    "forward", "sampling", "bubble", "period", "busy", "launch", "finalize", "handoff", "recv",
    "compute", "comm", "comm_exposed",
)  # fmt: skip
NS = (
    "forward_start", "forward_end", "sampling_start", "sampling_end", "launch_start",
    "launch_end", "finalize_start", "finalize_end",
)  # fmt: skip


@dataclass
class Side:
    """One trace's ranks side by side: the analysis's answers and the brute force's."""

    con: duckdb.DuckDBPyConnection
    run_ids: list[str]  # in rank order
    steps: pd.DataFrame  # rank_steps / split_rank_steps: one row per rank and step
    summary: dict  # ranks.summary's entry, as `bubblelab analyze` reports it
    tables: list[bf.Table]  # brute force: per rank, rank 0's step -> row
    facts: dict = field(default_factory=dict)  # what each trace's own test needs


def ours_side() -> Side:
    con = connect(None)
    ingest_trace(OURS, None, {}, con=con)
    groups = ranks.tp_groups(con)
    (lead,) = groups["run_id"].unique()
    steps = ranks.rank_steps(con, lead)
    (summary,) = ranks.analyze_ranks(con)
    with plain_sqlite(OURS) as path:
        rows = load(path)
        pids, devices = bf.our_ranks(path), bf.process_devices(path)
        tables = [
            bf.our_table(
                bf.of_process(rows, pid), bf.our_ranges(path, pid), bf.step_marks(path, pid)
            )
            for pid in pids
        ]
    run_ids = groups.sort_values("rank")["rank_run_id"].tolist()
    return Side(con, run_ids, steps, summary, tables, {"pids": pids, "devices": devices})


def nano_side() -> Side:
    con = connect(None)
    ingested = ingest_trace(NANO, None, {}, con=con)
    report = overview.analyze(con, ingested)  # as `bubblelab analyze` runs it: warm-up 5
    (split,) = report["split_engines"]
    run_ids = split["run_ids"]
    steps = ranks.split_rank_steps(con, run_ids)
    with plain_sqlite(NANO) as path:
        rows = load(path)
        devices = bf.process_devices(path)
        pids = sorted(devices, key=lambda pid: (devices[pid], pid))  # ranked by their GPUs
        found = [bf.foreign_steps(bf.of_process(rows, pid)) for pid in pids]
        own = [
            bf.foreign_table(bf.of_process(rows, pid), windows)
            for pid, (_, windows) in zip(pids, found, strict=True)
        ]
    facts = {"pids": pids, "devices": devices, "found": found, "own": own, "split": split}
    # ranks.summary as defined; analyze shows it less the cross-rank edges (test below)
    (summary,) = ranks.summary(steps, WARMUP_STEPS)
    return Side(con, run_ids, steps, summary, bf.split_table(own), facts)


@pytest.fixture(scope="module")
def ours() -> Side:
    return ours_side()


@pytest.fixture(scope="module")
def nano() -> Side:
    return nano_side()


@pytest.fixture(scope="module", params=["ours", "nano"])
def side(request) -> Side:
    return request.getfixturevalue(request.param)


def ns(ms: float | None) -> int | None:
    """A time the analysis gives in ms as whole ns (None for NULL)."""
    return None if ms is None or pd.isna(ms) else round(float(ms) * 1e6)


def whole(x) -> int | None:
    return None if x is None or pd.isna(x) else int(x)


def close(got: float | None, want: float | None) -> bool:
    if got is None or want is None or (isinstance(got, float) and math.isnan(got)):
        return want is None and (got is None or math.isnan(got))
    return abs(got - want) <= TOL_MS


def steady(side: Side) -> list[int]:
    return bfx.steady(side.tables, WARMUP_STEPS)


# -- who is which rank -----------------------------------------------------------------------------
def test_ours_ranks_are_the_planner_then_the_gpus(ours):
    """Ranked at ingest (tp_assign_ranks.sql): rank 0 is the process with `plan` ranges, the
    worker the next GPU; one tensor-parallel run of two ranks."""
    runs = ours.con.execute(
        "SELECT r.run_id, r.rank, r.tensor_parallel, s.pid, s.device FROM runs r "
        "JOIN step_rules s USING (run_id) ORDER BY r.rank"
    ).fetchall()
    assert [(rank, tp) for _, rank, tp, _, _ in runs] == [(0, 2), (1, 2)]
    assert [pid for *_, pid, _ in runs] == ours.facts["pids"]
    assert [device for *_, device in runs] == [ours.facts["devices"][p] for p in ours.facts["pids"]]
    assert [run for run, *_ in runs] == ours.run_ids


def test_nano_each_process_finds_its_steps_by_its_own_rule_and_they_line_up(nano):
    """Each process steps by the rule the brute force picks (rank 0: the sync that reads each
    step's tokens back; rank 1, which samples nothing: one CUDA-graph replay a step), with the
    same windows; split_engines names the two as one engine in GPU order, and every step of
    rank 1 is matched to a distinct step of rank 0."""
    runs = nano.con.execute(
        "SELECT run_id, rule, pid, device FROM step_rules ORDER BY device"
    ).fetchall()
    assert [run for run, *_ in runs] == nano.run_ids
    assert [pid for _, _, pid, _ in runs] == nano.facts["pids"]
    assert (
        [rule for _, rule, _, _ in runs]
        == [r for r, _ in nano.facts["found"]]
        == [
            "sync",
            "graph",
        ]
    )
    for (run, *_), (_, windows) in zip(runs, nano.facts["found"], strict=True):
        stored = nano.con.execute(
            "SELECT host_start, host_end FROM step_windows WHERE run_id = ? ORDER BY step", [run]
        ).fetchall()
        assert [tuple(w) for w in stored] == windows
    split = nano.facts["split"]
    assert split["gpus"] == 2
    own = nano.facts["own"]
    matched = [len(t) for t in nano.tables]
    assert split["matched_steps"] == [[m, len(o)] for m, o in zip(matched, own, strict=True)]
    # rank 0 matches itself; rank 1's 63 graph-replay steps each land on their own rank-0 step
    assert matched == [len(own[0]), len(own[1])] == [65, 63]
    assert len({r["own_step"] for r in nano.tables[1].values()}) == 63
    table = nano.steps
    assert table.groupby("rank")["step"].apply(lambda s: s.is_unique).all()
    assert sorted(table[table["rank"] == 1]["own_step"]) == list(range(63))


# -- the side-by-side table ------------------------------------------------------------------------
def test_every_rank_step_row_matches_brute_force(side):
    """Per rank and step: kind, batch size, the GPU spans and host phases in time (ns), forward,
    sampling, bubble, period, busy, host phases, hand-off, compute and communication (union per
    class), communication with no compute beside it, collectives launched; nano: own step."""
    assert sorted(side.steps["rank"].unique()) == [0, 1]
    assert side.steps["rank_run_id"].map(side.run_ids.index).tolist() == side.steps["rank"].tolist()
    want_keys = sorted((rank, step) for rank, t in enumerate(side.tables) for step in t)
    assert sorted(zip(side.steps["rank"], side.steps["step"], strict=True)) == want_keys
    for row in side.steps.to_dict("records"):
        want = side.tables[row["rank"]][row["step"]]
        got = {
            **{c: ns(row[f"{c}_ms"]) for c in MS},
            **{c: whole(row[c]) for c in (*NS, "comm_kernels", "batch_size")},
            "kind": row["kind"],
        }
        expected = {
            **{c: want[f"{c}_ns"] for c in MS},
            **{c: want[c] for c in (*NS, "comm_kernels", "batch_size")},
            "kind": want["kind"],
        }
        if "own_step" in row:
            got["own_step"], expected["own_step"] = int(row["own_step"]), want["own_step"]
        assert got == expected, (row["rank"], row["step"])


def test_stragglers_and_skews_of_every_step_match_brute_force(side):
    """tp_straggler.sql: which rank's GPU (and host) finished each step last, by how much after
    rank 0 and after the next-to-last rank; tp_skew.sql: latest minus earliest of each time."""
    steps = sorted({s for t in side.tables for s in t})
    late, spread = bfx.stragglers(side.tables, steps), bfx.skews(side.tables, steps)
    got = ranks.stragglers(side.steps)
    assert got["step"].tolist() == steps
    for row in got.to_dict("records"):
        want = late[row["step"]]
        assert {
            "ranks": int(row["ranks"]),
            "gpu_straggler": whole(row["gpu_straggler"]),
            "gpu_extra_ns": ns(row["gpu_extra_ms"]),
            "gpu_margin_ns": ns(row["gpu_margin_ms"]),
            "host_straggler": whole(row["host_straggler"]),
            "host_extra_ns": ns(row["host_extra_ms"]),
            "host_margin_ns": ns(row["host_margin_ms"]),
        } == want, row["step"]
    got = ranks.skew(side.steps)
    assert got["step"].tolist() == steps
    for row in got.to_dict("records"):
        want = spread[row["step"]]
        assert {
            "ranks": int(row["ranks"]),
            **{f"{c}_skew_ns": ns(row[f"{c}_skew_ms"]) for c in bfx.SKEWED},
        } == want, row["step"]


# -- the summary over the steady steps -------------------------------------------------------------
def test_per_rank_summary_over_steady_steps_matches_brute_force(side):
    """summary() as analyze reports it: rank 0's steady steps; per rank the medians of every
    per-step time, its lag behind rank 0, its share of the steps it was the straggler in; the
    straggler's and the skews' median, p90 and max; the cross-rank view of each steady step."""
    chosen = steady(side)
    assert side.summary["ranks"] == 2 and side.summary["steady_steps"] == len(chosen)
    want = bfx.per_rank(side.tables, chosen)
    assert [r["rank"] for r in side.summary["per_rank"]] == [0, 1]
    for got, expected in zip(side.summary["per_rank"], want, strict=True):
        assert got["rank_run_id"] == side.run_ids[got["rank"]]
        for key, value in expected.items():
            assert close(got[key], value), (got["rank"], key, got[key], value)
    late, spread = bfx.stragglers(side.tables, chosen), bfx.skews(side.tables, chosen)
    for c in ("gpu_extra", "gpu_margin", "host_extra"):
        expected = bfx.stats_ms([late[s][f"{c}_ns"] for s in chosen])
        for stat, value in side.summary["straggler"][f"{c}_ms"].items():
            assert close(value, expected[stat]), (c, stat)
    for c in bfx.SKEWED:
        expected = bfx.stats_ms([spread[s][f"{c}_skew_ns"] for s in chosen])
        for stat, value in side.summary["skew"][f"{c}_skew_ms"].items():
            assert close(value, expected[stat]), (c, stat)
    assert [v["step"] for v in side.summary["steps"]] == chosen
    for view in side.summary["steps"]:
        step = view["step"]
        assert view["gpu_straggler"] == late[step]["gpu_straggler"]
        assert ns(view["gpu_extra_ms"]) == late[step]["gpu_extra_ns"]
        assert ns(view["forward_start_skew_ms"]) == spread[step]["forward_start_skew_ns"]
        assert view["kind"] == side.tables[0][step]["kind"] == "decode"
        assert view["batch_size"] == side.tables[0][step]["batch_size"]


def test_the_figures_a_user_reads_are_sane(side):
    """Both ranks on every steady step; shares within [0, 1] and each step's GPU straggler share
    adding up to 1; a step's compute and communication inside its GPU span, exposed collective
    time within the collectives' time; period = forward + sampling + bubble where the spans lie in
    the period."""
    chosen = steady(side)
    assert chosen and all(step in t for t in side.tables for step in chosen)
    shares = [r["gpu_straggler_share"] for r in side.summary["per_rank"]]
    assert all(0 <= s <= 1 for s in shares) and math.isclose(sum(shares), 1)
    for r in side.summary["per_rank"]:
        assert r["host_straggler_share"] is None or 0 <= r["host_straggler_share"] <= 1
    for table in side.tables:
        for row in table.values():
            if row["compute_ns"] is None:
                continue
            gpu_span = bfx.gpu_end(row) - row["forward_start"]
            assert row["compute_ns"] + row["comm_ns"] <= gpu_span
            assert 0 <= row["comm_exposed_ns"] <= row["comm_ns"]
            assert row["comm_kernels"] > 0  # every step of either engine all-reduces
    for step in chosen:
        row = side.tables[0][step]
        parts = row["forward_ns"] + (row["sampling_ns"] or 0) + row["bubble_ns"]
        assert parts == row["period_ns"] or row["sampling_ns"] is None


def test_analyze_leaves_out_what_compares_edges_cut_by_different_rules(nano):
    """analyze's split entry: the per-rank medians of ranks.summary, without the lags, stragglers
    and skews that compare rank 0's sync-cut edges with rank 1's graph-cut ones."""
    split = nano.facts["split"]
    assert "cut by graph and sync rules" in split["cross_rank_timing"]
    shown, defined = split["ranks"], nano.summary
    for got, want in zip(shown["per_rank"], defined["per_rank"], strict=True):
        for key in ("forward_ms", "bubble_ms", "period_ms", "compute_ms", "comm_ms"):
            assert got[key] == want[key]
        assert got["forward_lag_ms"] is None and got["gpu_straggler_share"] is None
    assert all(v is None for stats in shown["skew"].values() for v in stats.values())
    assert all(v is None for stats in shown["straggler"].values() for v in stats.values())
