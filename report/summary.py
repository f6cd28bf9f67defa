"""The report's numbers, one row per configuration: steady-state medians pooled over repeats with
their spread, the headline, and the frames the step figures draw.

A configuration is what `report.labels.run_name(run, depth=False)` names (preset · device ·
streams); its repeats at one depth pool here, so a sweep of 3 repeats reads as one row, not three.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from ..core.words import counted
from ..costmodel.compare import step_summary
from ..costmodel.configs import known_int
from ..costmodel.headline import headline as forecast_headline
from ..costmodel.repeats import stop_words
from ..profiling.analysis import SPLITS, steady_state
from ..runs.rundir import Results
from .labels import run_name

# Steady-state medians shown per configuration, at depth 1 and depth 2.
STEP_VALUES = (
    "forward_ms",
    "sampling_ms",
    "kernel_gap_ms",
    "period_ms",
    "bubble_ms",
    "busy_pct",
    "tokens_per_s",
)
CLOCK_VALUES = ("sm_clock_mhz", "power_w")  # recorded by CUDA runs only


def unprofiled(results: Results) -> Results:
    """The runs made without a profiler when a sweep has both kinds (the cost model's rule,
    costmodel.configs.pair_runs): per-configuration tables and figures then show what the engine
    does, not what nsys made of it."""
    runs = results.runs
    if "profiled" not in runs or not runs["profiled"].eq(False).any():
        return results
    return only_runs(results, set(runs.loc[runs["profiled"].eq(False), "run_id"]))


def without_workers(results: Results, splits: list[dict]) -> Results:
    """Another engine split over GPUs shown as one engine: its rank 0's run stands for it in the
    per-configuration tables (its ranks are processes of one step, not repeats to pool; the
    split section shows each), as a tensor-parallel run of ours does."""
    workers = {run_id for s in splits for run_id in s["run_ids"][1:]}
    if not workers:
        return results
    return only_runs(results, set(results.runs["run_id"]) - workers)


def only_runs(results: Results, ids: set[str]) -> Results:
    """results with only the runs `ids`, in every table."""

    def only(frame: pd.DataFrame) -> pd.DataFrame:
        return frame[frame["run_id"].isin(ids)] if "run_id" in frame else frame

    return replace(
        results,
        runs=only(results.runs),
        steps=only(results.steps),
        attribution=only(results.attribution),
        gaps=only(results.gaps),
        timeline=only(results.timeline),
        requests=only(results.requests),
        ranks=only(results.ranks),
        rank_attribution=only(results.rank_attribution),
    )


def config_table(results: Results) -> list[dict]:
    """One record per configuration: for each value and depth, the median over its repeats
    (`<value>_d1`), and the spread (`<value>_d1_lo`, `_hi`: the smallest and largest repeat) when
    there are several. A run of unknown depth (a trace of another engine) fills the first slot, and
    its record says `as_traced`."""
    per_run = step_summary(results.runs, results.steps)
    if per_run.empty:
        return []
    names = {r["run_id"]: run_name(r, depth=False) for r in results.runs.to_dict("records")}
    per_run = per_run.assign(
        config=per_run["run_id"].map(names),  # the name the figures use too
        busy_pct=100 * per_run["busy_ms"] / per_run["period_ms"],
    )
    clocks = [c for c in CLOCK_VALUES if c in results.runs and results.runs[c].notna().any()]
    if clocks:
        per_run = per_run.merge(results.runs[["run_id", *clocks]], on="run_id", how="left")
    values = [*STEP_VALUES, *clocks]
    rows = []
    for config, runs in per_run.groupby("config", sort=False):
        batch = pd.to_numeric(runs["batch"], errors="coerce").median()  # unknown: another engine
        depths = [known_int(d) or 0 for d in runs["depth"]]
        as_traced = 0 in depths
        row: dict = {"config": config, "batch": None if pd.isna(batch) else int(batch)}
        row["run_ids"] = list(runs["run_id"])
        row["as_traced"] = as_traced
        for depth in (1, 2):
            at = runs[[d == (0 if as_traced and depth == 1 else depth) for d in depths]]
            row[f"repeats_d{depth}"] = len(at)
            for value in values:
                v = pd.to_numeric(at[value], errors="coerce").dropna()
                row[f"{value}_d{depth}"] = float(v.median()) if len(v) else None
                spread = len(v) > 1
                row[f"{value}_d{depth}_lo"] = float(v.min()) if spread else None
                row[f"{value}_d{depth}_hi"] = float(v.max()) if spread else None
        rows.append(row)
    return rows


def step_columns(configs: list[dict], device: str) -> list[dict]:
    """The step table's value columns: key, header, decimals, and whether the spread over repeats is
    shown (for what the runs measure as an outcome: period, bubble, throughput). Kernel gaps only
    where measured (nsys traces: the in-process timeline records spans, so they read 0) and clocks
    only where recorded. Power shares the clock's cell, below it: the table fits the page."""
    columns = [
        ("forward_ms", "forward ms", 2, False),
        ("sampling_ms", "sampling ms", 3, False),
        ("kernel_gap_ms", "kernel gaps ms", 3, False),
        ("period_ms", "period ms", 2, True),
        ("bubble_ms", "bubble ms", 3, True),
        ("busy_pct", f"{device} busy %", 0, False),
        ("tokens_per_s", "tokens/s", 0, True),
        ("sm_clock_mhz", "SM clock MHz", 0, False),
        ("power_w", "power W", 0, False),
    ]
    out = [
        dict(key=key, header=header, nd=nd, spread=spread, below=None)
        for key, header, nd, spread in columns
        if any(c.get(f"{key}_d{d}") for c in configs for d in (1, 2))
    ]
    keys = [c["key"] for c in out]
    if "sm_clock_mhz" in keys and "power_w" in keys:
        out.pop(keys.index("power_w"))
        clock = out[keys.index("sm_clock_mhz")]
        clock.update(header="SM clock MHz", below="power_w")
    return out


def headline(predictions: pd.DataFrame, configs: list[dict]) -> dict | None:
    """The page's headline (costmodel.headline: the forecast from the depth-1 run alone beside the
    observed speedup, for the median configuration, with the range over every one and the
    forecast's largest miss), and the median configuration's bubble at each depth."""
    out = forecast_headline(predictions)
    if out is None:
        return None
    paired = [c for c in configs if c["bubble_ms_d1"] is not None and c["bubble_ms_d2"] is not None]

    def median(key: str) -> float | None:
        values = [c[key] for c in paired if c[key] is not None]
        return float(np.median(values)) if values else None

    return out | {
        "bubble_d1": median("bubble_ms_d1"),
        "bubble_d2": median("bubble_ms_d2"),
        "busy_d1": median("busy_pct_d1"),
        "busy_d2": median("busy_pct_d2"),
    }


def with_repeat_stops(predictions: pd.DataFrame, provenance: dict) -> pd.DataFrame:
    """The prediction table with `repeat_stop`: why each configuration's repeats stopped, as the
    sweep recorded it (provenance "repeats", by stream count; runs.repeats), e.g. "known to ±1
    point after 8 pairs", "budget spent after 12 pairs (31 s)" or "±1 point out of reach (~60 pairs)
    after 4 pairs (9 s)"; None without a record."""
    verdicts = provenance.get("repeats") if isinstance(provenance, dict) else None
    by_streams = {v["streams"]: v for v in verdicts or [] if isinstance(v, dict) and "stop" in v}
    stops = []
    for streams in predictions.get("streams", pd.Series(dtype=object)):
        v = by_streams.get(streams)
        what = stop_words(v) if v else None
        stops.append(
            f"{what} after {counted(v['pairs'], 'pair')} ({v['spent_s']:.0f} s)" if v else None
        )
    return predictions.assign(repeat_stop=stops)


def gap_samples(results: Results) -> list[tuple[str, int, np.ndarray]]:
    """(configuration, depth, idle gaps in ms) for figures.gap_histogram; repeats pool."""
    if len(results.gaps):
        source = results.gaps
    else:  # without a gap table: each step's idle time
        source = results.steps.rename(columns={"bubble_ms": "gap_ms"})
    gaps = {run_id: g["gap_ms"].dropna().to_numpy(float) for run_id, g in source.groupby("run_id")}
    pooled: dict[tuple[str, int], list[np.ndarray]] = {}
    for run in results.runs.to_dict("records"):
        key = (run_name(run, depth=False), known_int(run["depth"]) or 0)
        pooled.setdefault(key, []).append(gaps.get(run["run_id"], np.array([])))
    return [(config, depth, np.concatenate(arrays)) for (config, depth), arrays in pooled.items()]


def attribution_per_step(results: Results) -> pd.DataFrame:
    """Steady-state bubble per step by host phase, both splits (profiling.analysis.attribution):
    config, depth, phase, top_level, time_ms (where the bubble's time went: the headline) and
    began_ms (where each gap began), ms per step; a split the results file did not keep (schema 2
    kept one) is missing.

    The attribution may cover any subset of a run's steps (the profiler's steady state), so it is
    used for shares only; the size of each bar is the run's mean steady-state bubble_ms. Repeats of
    a configuration share a bar: the mean over its runs.
    """
    columns = ["config", "depth", "phase", "top_level", *SPLITS]
    if results.attribution.empty:
        return pd.DataFrame(columns=columns)
    attribution = results.attribution.reindex(
        columns=list(dict.fromkeys(["run_id", "phase", "top_level", *SPLITS, *results.attribution]))
    )
    rows = []
    for run in results.runs.to_dict("records"):
        key = dict(config=run_name(run, depth=False), depth=known_int(run["depth"]) or 0)
        a = attribution[attribution["run_id"] == run["run_id"]]
        steady = steady_state(results.steps[results.steps["run_id"] == run["run_id"]])
        bubble = float(steady["bubble_ms"].clip(lower=0).mean()) if len(steady) else 0.0
        totals = a[list(SPLITS)].sum()
        if not (totals > 0).any():  # no idle time at all: an empty bar, still labelled
            rows.append(dict(**key, phase="other", top_level="other", time_ms=0.0, began_ms=0.0))
            continue
        for phase, split in a.groupby("phase", sort=False):
            shares = split[list(SPLITS)].sum(min_count=1) / totals.where(totals > 0)
            top = split["top_level"].dropna()
            rows.append(
                dict(**key, phase=phase, top_level=top.iloc[0] if len(top) else phase,
                     **(bubble * shares).to_dict())
            )  # fmt: skip
    keys = ["config", "depth"]
    runs = results.runs.assign(
        config=results.runs.apply(run_name, axis=1, depth=False),
        depth=[known_int(d) or 0 for d in results.runs["depth"]],
    )
    repeats = runs.groupby(keys).size().rename("repeats")
    table = pd.DataFrame(rows).groupby([*keys, "phase", "top_level"], sort=False)[list(SPLITS)]
    table = table.sum(min_count=1).reset_index().join(repeats, on=keys)
    table[list(SPLITS)] = table[list(SPLITS)].div(table["repeats"], axis=0)
    return table[columns]


def headline_split(attribution: pd.DataFrame) -> str:
    """The split the report draws: where the bubble's time went, unless the results file kept only
    where each gap began (schema 2's measured runs)."""
    return "time_ms" if attribution["time_ms"].notna().any() or attribution.empty else "began_ms"


def attribution_parts(attribution: pd.DataFrame) -> dict:
    """Both splits per configuration, depth and top-level part of the loop, ms per step, for the
    report's table: parts (largest time first) and one row per configuration and depth."""
    by_part = attribution.groupby(["config", "depth", "top_level"], sort=False)[list(SPLITS)]
    by_part = by_part.sum(min_count=1)
    order = by_part.groupby("top_level")[list(SPLITS)].sum().sort_values(list(SPLITS))
    parts = [p for p in order.index[::-1] if (order.loc[p] > 0).any()]  # not a bar's empty label
    rows = []
    for (config, depth), table in by_part.groupby(level=["config", "depth"], sort=False):
        cells = table.droplevel(["config", "depth"]).reindex(parts)
        rows.append(
            dict(config=config, depth=depth or None,  # 0: as traced, depth unknown
                 cells=[(_plain(r.time_ms), _plain(r.began_ms)) for r in cells.itertuples()])
        )  # fmt: skip
    return {"parts": parts, "rows": rows}


def _plain(value: float) -> float | None:
    return None if pd.isna(value) else float(value)
