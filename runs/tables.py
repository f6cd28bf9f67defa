"""The one place a run directory's tables are assembled from a catalog: runs, steps, attribution,
gaps, lanes.

run-and-profile (after its runs) and the committed traces (for the notebooks) both build their
`Results` here, from profiling's public answers, so the report, `bubblelab analyze` and the
notebooks agree on every number.
"""

from __future__ import annotations

import duckdb
import pandas as pd

from ..core.steady import steady_state, steady_steps
from ..profiling import analysis, ranks
from ..profiling.catalog import map_cursors
from .rundir import Results

# Idle gaps of this many steady steps per run: a forward leaves ~1,000-2,000 kernel gaps a step.
GAP_STEPS = 50
LANE_STEPS = 12  # steps of host ranges and GPU islands kept per run for the lane chart


def collect(
    con: duckdb.DuckDBPyConnection, run_ids: list[str], provenance: dict | None = None
) -> Results:
    """The tables of the given runs of an open catalog, in the order given. The ranks r > 0 of a
    tensor-parallel run are not runs of their own here: with rank 0's run they fill `ranks` and
    `rank_attribution` (profiling.ranks), over rank 0's steady steps."""
    groups = ranks.tp_groups(con)
    workers = set(groups.loc[groups["rank"] > 0, "rank_run_id"])
    run_ids = [r for r in run_ids if r not in workers]
    runs = analysis.runs(con)
    runs = runs.set_index("run_id").loc[run_ids].reset_index()
    # Each run's queries side by side: a sweep has ~50 runs of ~70 ms each, mostly DuckDB's.
    each = map_cursors(con, _run_tables, run_ids, most=8)
    steps, attribution, gaps, lanes = ([tables[i] for tables in each] for i in range(4))
    rank_steps = _cat([ranks.rank_steps(con, r) for r in groups["run_id"].unique() if r in run_ids])
    rank_attribution = (
        ranks.rank_attribution(con, steady_steps(rank_steps)) if len(rank_steps) else pd.DataFrame()
    )
    return Results(
        runs, _cat(steps), _cat(attribution), _cat(gaps), _cat(lanes), provenance=provenance or {},
        ranks=rank_steps, rank_attribution=rank_attribution,
    )  # fmt: skip


def _run_tables(cur: duckdb.DuckDBPyConnection, run_id: str) -> tuple[pd.DataFrame, ...]:
    """One run's steps, attribution, idle gaps and lanes."""
    per_step = analysis.per_step(cur, run_id)
    steady = steady_state(per_step)
    g = analysis.idle_gaps(cur, run_id, analysis.middle(steady, GAP_STEPS))
    gaps = pd.DataFrame(
        {"run_id": run_id, "step": g["step"], "gap_ms": g["idle_us"] / 1e3,
         "began_in": g["began_in"]}
    )  # fmt: skip
    return (
        per_step,
        analysis.attribution(cur, run_id, steady),
        gaps,
        analysis.lane_ranges(cur, run_id, analysis.middle(steady, LANE_STEPS)),
    )


def _cat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    frames = [f for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def config_names(
    runs: list[dict], rank_of: dict[str, tuple[str, int]] | None = None
) -> dict[str, str]:
    """Each run named by where it came from, never by its hash. Ours (the depth is known) by
    configuration, e.g. `qwen3-0.6b·s8·d2·r0` (r: the repeat, in the order given); split over GPUs
    `qwen3-32b·tp2·s8·d2·r0`, and a worker rank's own timeline `...·r0·rank1`. Another engine's
    trace by its file's stem, `cupy-decode` (a second run of that stem `cupy-decode·2`). Runs with
    neither a model nor a trace file are named by the start of their id.
    rank_of: the runs that are rank r > 0 of a tensor-parallel run, as rank_run_id -> (rank 0's
    run_id, r); each is named after its rank 0."""
    workers = {k: v for k, v in (rank_of or {}).items() if v[1] > 0}
    names: dict[str, str] = {}
    seen: dict[str, int] = {}
    for run in runs:
        if run["run_id"] in workers:
            continue
        stem = trace_stem(run.get("trace_path"))
        if _known(run.get("depth")) is None and stem:  # another engine's trace: its file
            seen[stem] = count = seen.get(stem, 0) + 1
            names[run["run_id"]] = stem if count == 1 else f"{stem}·{count}"
            continue
        model = next(
            (m for m in (run.get("preset"), run.get("model")) if isinstance(m, str) and m), None
        )
        parts = [model or str(run["run_id"])[:8]]
        for prefix, key in (("tp", "tensor_parallel"), ("s", "streams"), ("d", "depth")):
            value = _known(run.get(key))
            if value is not None and (key != "tensor_parallel" or value > 1):
                parts.append(f"{prefix}{value}")
        stem = "·".join(parts)
        rank = _known(run.get("rank")) or 0
        seen[f"{stem}@{rank}"] = repeat = seen.get(f"{stem}@{rank}", -1) + 1
        names[run["run_id"]] = f"{stem}·r{repeat}" + (f"·rank{rank}" if rank else "")
    for run_id, (lead, rank) in workers.items():
        names[run_id] = f"{names.get(lead, str(lead)[:8])}·rank{rank}"
    return names


def trace_stem(path: object) -> str | None:
    """A trace file's name without its export suffixes: x/cupy-decode.sqlite.gz -> cupy-decode."""
    if not isinstance(path, str) or not path:
        return None
    name = path.replace("\\", "/").rsplit("/", 1)[-1]
    for suffix in (".gz", ".sqlite", ".nsys-rep", ".qdrep"):
        name = name.removesuffix(suffix)
    return name or None


def _known(value: object) -> int | None:
    return None if value is None or pd.isna(value) else int(value)  # type: ignore[call-overload]


def spans_from_steps(steps: pd.DataFrame) -> pd.DataFrame:
    """Each step's forward and sampling span rebuilt from the per-step table alone (lane "gpu",
    phase, step, start_ns, end_ns): the forward from gpu_start_ns, sampling right after it. Exact
    for the forward; sampling starts later where the host launched it late (the catalog's
    step_spans has the true start)."""
    fwd_end = steps["gpu_start_ns"] + steps["forward_ms"] * 1e6
    parts = [
        ("forward", steps["gpu_start_ns"], fwd_end),
        ("sampling", fwd_end, fwd_end + steps["sampling_ms"].fillna(0) * 1e6),
    ]
    return pd.concat(
        [
            pd.DataFrame(
                {"lane": "gpu", "phase": phase, "step": steps["step"], "start_ns": s, "end_ns": e}
            )
            for phase, s, e in parts
        ],
        ignore_index=True,
    )
