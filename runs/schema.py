"""Older results.json documents, read as the current schema (rundir.read_results calls `migrate`).

Schema 2 added, per run: `repeat` (runs of one configuration with the same repeat saw the same
requests, so depth 1 and depth 2 pair up by it), `profiled` (run under nsys), the workload's
`prompt_len`, `constraint` and `constrained_share`, and the engine limits that shape the schedule
(`max_num_seqs`, `max_num_batched_tokens`, `max_model_len`); and a `requests` table (run_id,
request, prompt_len, output_len, max_tokens, constrained). A schema-1 sweep records its SweepSpec in
provenance["sweep"], so the workload can be rebuilt: each request's cap is regenerated from the same
seed, its output length is that cap when the run was unconstrained (checked against the run's token
count), and otherwise read off the depth-1 step sequence (costmodel.schedule.requests_from_steps).

Schema 3 keeps both splits of the bubble by host phase in `attribution` and `rank_attribution`:
time_ms (where the bubble's time went) and began_ms (where each gap began), with their shares.
Schema 2 kept one, as bubble_ms (and bubble_share): where each gap began for measured runs
(runs.tables.collect took profiling.analysis.attribution's rule of the time), where its time went
for the demo's simulated runs (costmodel.simulate's time-weighted split, "other" outside any
phase). It is read as that split; the other one is missing (null).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..costmodel.costs import launched
from ..costmodel.schedule import requests_from_steps
from .workload import WorkloadSpec, arrival_times, output_lengths

SIMULATED = "simulated"  # the provenance key that marks a demo's results.json

REQUEST_COLUMNS = ["run_id", "request", "prompt_len", "output_len", "max_tokens", "constrained"]
ENGINE_DEFAULTS = {"max_num_batched_tokens": 8192}  # EngineConfig's default, never set by schema 1


def migrate(doc: dict) -> dict:
    """A schema-1 or schema-2 document as schema 3 (returns a new dict; tables stay lists of
    records)."""
    if doc.get("schema_version") == 1:
        doc = _from_schema_1(doc)
    return _from_schema_2(doc)


def _from_schema_2(doc: dict) -> dict:
    split = "time" if (doc.get("provenance") or {}).get(SIMULATED) is True else "began"
    out = {**doc, "schema_version": 3}
    for name in ("attribution", "rank_attribution"):
        if isinstance(records := doc.get(name), list):  # anything else: read_results says so
            out[name] = [_both_splits(r, split) for r in records]
    return out


def _both_splits(record: object, split: str) -> object:
    if not isinstance(record, dict):
        return record
    kept = {k: v for k, v in record.items() if k not in ("bubble_ms", "bubble_share")}
    splits = dict.fromkeys(("time_ms", "began_ms", "time_share", "began_share"))
    return {
        **kept,
        **splits,
        f"{split}_ms": record.get("bubble_ms"),
        f"{split}_share": record.get("bubble_share"),
    }


def _from_schema_1(doc: dict) -> dict:
    """A schema-1 document as schema 2."""
    runs = pd.DataFrame.from_records(doc.get("runs") or [])
    steps = pd.DataFrame.from_records(doc.get("steps") or [])
    sweep = (doc.get("provenance") or {}).get("sweep") or {}
    if runs.empty:
        return {**doc, "schema_version": 2}
    runs = runs.assign(
        repeat=[_repeat(run_id) for run_id in runs["run_id"]],
        profiled=runs.get("source", pd.Series(index=runs.index, dtype=object)).eq("nsys"),
        prompt_len=sweep.get("prompt_len"),
        constraint=sweep.get("constraint"),
        constrained_share=sweep.get("constrained_share", 0.0 if sweep else None),
        max_num_seqs=max(8, *sweep["streams"]) if sweep.get("streams") else None,
        max_num_batched_tokens=ENGINE_DEFAULTS["max_num_batched_tokens"] if sweep else None,
        max_model_len=sweep.get("max_model_len"),
    )
    requests = [_requests(run, steps, sweep) for run in runs.to_dict("records")] if sweep else []
    requests = pd.concat([r for r in requests if r is not None] or [pd.DataFrame()])
    return {
        **doc,
        "schema_version": 2,
        "runs": _records(runs),
        "requests": _records(requests),
    }


def _records(frame: pd.DataFrame) -> list[dict]:
    return frame.astype(object).where(frame.notna(), None).to_dict("records")


def _repeat(run_id: str) -> int | None:
    """run-and-profile's run ids end in -r<repeat> (s8-d2-r1-timeline)."""
    match = re.search(r"-r(\d+)(?:-|$)", str(run_id))
    return int(match.group(1)) if match else None


def _requests(run: dict, steps: pd.DataFrame, sweep: dict) -> pd.DataFrame | None:
    if run.get("repeat") is None or run.get("prompt_len") is None:
        return None
    spec = WorkloadSpec(
        streams=int(run["streams"]),
        requests=int(run["requests"]),
        output_len_mean=float(sweep.get("output_len_mean", run["output_len_mean"])),
        prompt_len=int(run["prompt_len"]),
        seed=int(sweep.get("seed", 0)) + int(run["repeat"]),
    )
    caps = np.asarray(output_lengths(spec, np.random.default_rng(spec.seed)))  # its first draw
    constrained = bool(sweep.get("constrained_share"))
    if constrained:  # the grammar ends a request; its cap only bounds it (engine.workload)
        caps = np.maximum(caps, 64)
    lengths: np.ndarray | list[int] = caps  # unconstrained: every request produced its cap
    if constrained or int(caps.sum()) != int(run["generated_tokens"]):
        if (
            int(run["depth"]) == 2
        ):  # zombies hide the lengths in a depth-2 sequence; depth 1 has them
            return None
        mine = launched(steps[steps["run_id"] == run["run_id"]])
        found = requests_from_steps(mine, spec.prompt_len, caps.tolist(), constrained)
        if len(found) != len(caps):
            return None
        lengths = [r.output_len for r in found]
        caps = np.array([r.max_tokens for r in found])
    return pd.DataFrame(
        {
            "run_id": run["run_id"],
            "request": range(len(caps)),
            "prompt_len": spec.prompt_len,
            "output_len": np.asarray(lengths, dtype=int),
            "max_tokens": caps.astype(int),
            "constrained": constrained,
        }
    )


def with_arrivals(requests: pd.DataFrame, runs: pd.DataFrame, sweep: dict) -> pd.DataFrame:
    """A requests table written before it had arrival_s, of a sweep with an arrival rate: each
    run's arrivals regenerated from its repeat's seed (the sweep's seed + repeat), as make_requests
    drew them. Runs that cannot be matched to a repeat keep none (NaN)."""
    if requests.empty or "arrival_s" in requests or not sweep.get("arrival_rate"):
        return requests
    arrivals = []
    for run in runs.to_dict("records"):
        mine = requests[requests["run_id"] == run["run_id"]]
        if mine.empty or run.get("repeat") is None or pd.isna(run.get("repeat")):
            continue
        spec = WorkloadSpec(
            streams=int(run["streams"]), requests=len(mine),
            output_len_mean=float(sweep.get("output_len_mean", run["output_len_mean"])),
            prompt_len=int(mine["prompt_len"].iloc[0]), arrival_rate=float(sweep["arrival_rate"]),
            seed=int(sweep.get("seed", 0)) + int(run["repeat"]),
        )  # fmt: skip
        times = arrival_times(spec)
        arrivals.append(pd.Series(times[mine["request"].astype(int)], index=mine.index))
    found = pd.concat(arrivals) if arrivals else pd.Series(dtype=float)
    return requests.assign(arrival_s=found.reindex(requests.index))
