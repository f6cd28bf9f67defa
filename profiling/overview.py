"""`bubblelab analyze` as one answer: every run's steady-state summary, how its steps were found
and how sure that is, its bubble attribution, and bubblelab runs pooled per (depth, streams); the
ranks of a tensor-parallel run side by side. Built from profiling.analysis's per-run answers and
profiling.ranks (which reads them too, so this module sits above both).
"""

from __future__ import annotations

import pandas as pd

from ..core.steady import WARMUP_STEPS, steady_state
from . import foreign, queries, ranks
from .analysis import (
    Catalog,
    _float,
    _open,
    attribution,
    idle_gaps,
    ms_per_step,
    per_step,
    runs,
    summarize,
    sync_inventory,
)
from .evidence import AGREE, step_summary


def analyze(
    catalog: Catalog,
    run_ids: list[str] | None = None,
    warmup: int = WARMUP_STEPS,
    output_len: float | None = None,
) -> dict:
    """Steady-state summary and bubble attribution per run, and bubblelab runs pooled per (depth,
    streams).

    A run without `streams` metadata gets its steady-state batch size (the streams of a closed
    loop). Every run says how its steps were found and how sure that is (`steps_found`,
    evidence.step_summary; output_len, the tokens a request generates, when known, is one
    cross-check of a foreign run's step count); a foreign
    run adds its idle split (foreign.idle_split) and its host syncs per steady step
    (foreign.sync_summary). Every rank of a tensor-parallel run is a run here too (its `rank`);
    `tensor_parallel` puts the ranks of each such run side by side (profiling.ranks.analyze_ranks)
    and the pooled groups hold rank 0's runs only (a worker's steps are the same steps again).
    """
    con = _open(catalog)
    meta = runs(con).set_index("run_id")
    per_run, parts = [], {}
    for run_id in meta.index.tolist() if run_ids is None else run_ids:
        run = meta.loc[run_id]
        steps = per_step(con, run_id)
        steady = steady_state(steps, warmup)
        is_foreign = foreign.is_foreign(con, run_id)
        parts[run_id] = (
            steady,
            attribution(con, run_id, steady),
            idle_gaps(con, run_id, steady, bubble_only=True),  # kernel gaps stay in DuckDB
        )
        streams = run.streams if pd.notna(run.streams) else steady.batch_size.mode().max()
        syncs = sync_inventory(con, run_id)
        entry = {
            "run_id": run_id,
            "model": run.model,
            "device": run.device,
            "source": run.source,
            "depth": _int(run.depth),
            "streams": _int(streams),
            "tensor_parallel": _int(run.get("tensor_parallel")),
            "rank": _int(run.get("rank")),  # a tensor-parallel worker's own run: 1, 2, ...
            "steps_found": step_summary(con, run_id, steps, steady, output_len),
            **_digest([parts[run_id]]),
            "flagged_syncs": int(syncs.flagged.sum()),
        }
        if is_foreign:
            entry["idle_split"] = foreign.idle_split(parts[run_id][2], steady)
            entry["syncs_per_step"] = _records(foreign.sync_summary(syncs, steady))
        per_run.append(entry)
    groups = []
    ours = [
        r for r in per_run if r["steps_found"]["rule"] == foreign.OURS and not (r["rank"] or 0) > 0
    ]
    for depth, streams in sorted({(r["depth"], r["streams"]) for r in ours}, key=str):
        members = [r["run_id"] for r in ours if (r["depth"], r["streams"]) == (depth, streams)]
        groups.append(
            {
                "depth": depth,
                "streams": streams,
                "runs": members,
                **_digest([parts[m] for m in members]),
            }
        )
    tp = ranks.analyze_ranks(con, None if run_ids is None else list(run_ids), warmup)
    found = {r["run_id"]: r["steps_found"] for r in per_run}
    return {
        "warmup_steps": warmup, "runs": per_run, "groups": groups, "tensor_parallel": tp,
        "split_engines": split_engines(con, found, warmup),
    }  # fmt: skip


def split_engines(
    catalog: Catalog, found: dict[str, dict], warmup: int = WARMUP_STEPS
) -> list[dict]:
    """Each split engine among the runs of `found` (run_id -> its steps_found, evidence.
    step_summary): another engine's processes of one trace, each on its own GPU running
    collectives, their ranks side by side (analyze's `split_engines`; the report's section)."""
    con = _open(catalog)
    split = queries.run(
        con,
        "split_engines",
        {"run_ids": list(found), "ours": foreign.OURS, "comm_kernels": ranks.COMM_KERNELS},
    )
    return [_split_engine(con, list(r.run_ids), found, warmup) for r in split.itertuples()]


def _split_engine(con: Catalog, run_ids: list[str], found: dict[str, dict], warmup: int) -> dict:
    """Another engine split over GPUs: its processes' runs in the order of their GPUs (rank 0
    first) and their ranks side by side (ranks.summary of ranks.split_rank_steps: each rank's steps
    matched to rank 0's by shared GPU time), with how many of each rank's steps (`found`: each
    run's steps_found) found a match, and whether the ranks' steps are sure together (`sure`,
    `evidence`, `_confirmed`)."""
    steps = ranks.split_rank_steps(con, run_ids)
    matched = steps.groupby("rank_run_id")["own_step"].nunique().to_dict()
    (side_by_side,) = ranks.summary(steps, warmup) if len(steps) else (None,)
    counts = [[int(matched.get(r, 0)), found[r]["steps"]] for r in run_ids]
    evidence = _confirmed(run_ids, found, counts, side_by_side)
    rules = sorted({found[r]["rule"] for r in run_ids})
    apart = None
    if side_by_side is not None and _runs_into_next_step(steps) > 0.5:
        apart = (
            f"the ranks' steps were cut by {' and '.join(rules)} rules and most of a worker's run "
            "into rank 0's next step: their edges are where the rules cut, not where each rank's "
            "work lies, so no lag, straggler or skew between them"
        )
        _drop_cross_rank_timing(side_by_side)
    return {
        "run_ids": run_ids,
        "gpus": len(run_ids),
        "matched_steps": counts,
        "ranks": side_by_side,
        "sure": evidence is not None,
        "evidence": evidence,
        "cross_rank_timing": apart,
    }


def _runs_into_next_step(steps: pd.DataFrame) -> float:
    """The share of the workers' matched steps whose GPU span ends after rank 0's next step began
    (split_rank_steps' rows). Collectives end a step's work on every rank together, so a worker's
    step that reaches into rank 0's next one holds work of that next step: its rule cut it late."""
    lead = steps[steps["rank"] == 0].sort_values("step")
    after = dict(zip(lead["step"], lead["forward_start"].shift(-1), strict=True))
    workers = steps[steps["rank"] > 0]
    nexts = workers["step"].map(after)
    known = nexts.notna()
    if not known.any():
        return 0.0
    return float((workers["sampling_end"][known] > nexts[known]).mean())


def _drop_cross_rank_timing(side: dict) -> None:
    """Blank what compares the ranks' step edges (lags, stragglers, skews): on nano-vllm at TP 2
    rank 0's sync-cut steps open with its input upload and rank 1's graph-cut ones end with the next
    step's, which made rank 1 'last by 1.4 ms' where its graph ended with rank 0's."""
    edges = ("forward_lag_ms", "launch_lag_ms", "gpu_straggler_share", "host_straggler_share")
    for row in side["per_rank"]:
        row.update(dict.fromkeys(edges))
    for stats in (side["straggler"], side["skew"]):
        for key in stats:
            stats[key] = dict.fromkeys(stats[key])
    columns = {*side["straggler"], *side["skew"], "gpu_straggler", "host_straggler"}
    for step in side["steps"]:
        step.update({k: None for k in step if k in columns})


def _confirmed(
    run_ids: list[str], found: dict[str, dict], counts: list[list[int]], side: dict | None
) -> str | None:
    """Why the ranks' steps are sure together, or None. A worker of a split engine may have no
    read of its own to close its steps (it waits for rank 0's message outside the CUDA API), so
    its own rules stay unsure; rank 0's sure steps confirm its steps when each of them shares its
    GPU time with a distinct step of rank 0's (the collectives hold a step's ranks together) and
    its period is rank 0's within AGREE."""
    if side is None or found[run_ids[0]]["confidence"] != "high":
        return None
    if any(m != n for m, n in counts[1:]):
        return None
    periods = {r["rank"]: r.get("period_ms") for r in side["per_rank"]}
    lead = periods.get(0)
    if not lead or any(
        p is None or abs(p / lead - 1) > AGREE[1] for rank, p in periods.items() if rank
    ):
        return None
    others = ", ".join(f"rank {rank}: {periods[rank]:.3f} ms" for rank in sorted(periods) if rank)
    return (
        f"rank 0's steps are sure, and every step of the other ranks shares its GPU time with a "
        f"distinct one of them at the same period (rank 0: {lead:.3f} ms; {others})"
    )


def _digest(parts: list[tuple[pd.DataFrame, ...]]) -> dict:
    """summarize() of the pooled steady steps; their bubble per step by phase and by top-level
    part, split by time and by where each gap began (ms_per_step); the share of the bubble in gaps
    the host ended late (it launched the next work only after the GPU had gone idle)."""
    steady, split, gaps = (pd.concat(frames) for frames in zip(*parts, strict=True))
    bubble_gaps = gaps[gaps.within.isna() & gaps.launch_lag_us.notna()]
    late = (
        bubble_gaps.idle_us[bubble_gaps.launch_lag_us > 0].sum() / bubble_gaps.idle_us.sum()
        if bubble_gaps.idle_us.sum()
        else None
    )
    return {
        **summarize(steady),
        "attribution_ms_per_step": ms_per_step(split, len(steady)),
        "host_late_share": None if late is None else _float(late),
    }


def _records(table: pd.DataFrame) -> list[dict]:
    """A table as JSON-ready records (numpy scalars to Python, NaN to None)."""
    return [
        {k: (None if pd.isna(v) else v.item() if hasattr(v, "item") else v) for k, v in row.items()}
        for row in table.to_dict("records")
    ]


def _int(x) -> int | None:
    return None if x is None or pd.isna(x) else int(x)
