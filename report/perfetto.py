"""Runs as a Chrome trace (the JSON trace event format), for ui.perfetto.dev and chrome://tracing.

One process per run, named by its configuration and depth; in it one thread per lane: the host
(its phases as recorded, nested ranges inside their parents; for a foreign run, its sync waits on a
track of their own), the device (each step's forward and
sampling span) and the steps (one slice per step period, its per-step row in the args); from a
catalog, also every kernel and every copy (a track per stream) and every CUDA API call (a track per
host thread), a flow arrow from each launch call to the first op it launched. A
tensor-parallel run has a host and a device lane per rank ("rank 1 host", ...), on one clock. Step
ids are in every slice's args. Timestamps are microseconds from the run's first exported event, so
depth 1 and depth 2 of a configuration line up when opened together.

The trace is built as Python objects and serialised by `json`, so a trace-derived name (a phase,
a kernel, a run id) is always a JSON string, whatever characters it holds.
"""

from __future__ import annotations

import gzip
import itertools
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from ..core.files import write_atomic
from ..runs.rundir import Results
from ..runs.tables import spans_from_steps
from .labels import device_word, run_names

# Thread ids: host threads, the host's sync waits (a foreign run's), device tracks, steps.
HOST_TID, WAIT_TID, DEVICE_TID, STEPS_TID = 1, 50, 100, 200
# The raw ops' tracks, two ids apart (room for a second track where slices overlap): lane ->
# (first id, label).
OP_TRACKS = {"kernel": (300, "kernels, stream"), "copy": (600, "copies, stream"),
             "api": (800, "CUDA API, thread")}  # fmt: skip
RANK_TIDS = 1000  # rank r's host and device threads: r * RANK_TIDS + HOST_TID, ...
STEP_ARGS = (
    "kind",
    "batch_size",
    "period_ms",
    "forward_ms",
    "sampling_ms",
    "bubble_ms",
    "kernel_gap_ms",
    "busy_ms",
    "plan_ms",
    "launch_ms",
    "finalize_ms",
    "commit_ms",
    "wait_ms",
)


def chrome_trace(
    results: Results, ranges: pd.DataFrame | None = None, ops: str | None = None
) -> dict:
    """The trace of every run of results.

    ranges: every host range and step span of the runs (run_id, lane, phase, step, tid, start_ns,
    end_ns: profiling.analysis.trace_ranges on their catalog; rank, where a run ran on several),
    and the kernels, copies and API calls exported (ops says of which steps).
    None: the host ranges results.json kept (a window of steps per run) and the device spans
    rebuilt from the per-step table.
    """
    events: list[dict] = []
    names = run_names(results.runs)
    for pid, run in enumerate(results.runs.to_dict("records"), start=1):
        run["run_name"] = names[run["run_id"]]
        run_id = run["run_id"]
        steps = results.steps[results.steps["run_id"] == run_id].sort_values("step")
        if ranges is not None:
            own = ranges[ranges["run_id"] == run_id]
        else:
            host = results.timeline
            own = host[(host["run_id"] == run_id) & (host["lane"] == "host")] if len(host) else host
        if not ((own.get("lane", pd.Series(dtype=str)) == "gpu") & (_ranks(own) == 0)).any():
            # No spans recorded: results.json keeps durations only, a foreign run may have none.
            own = pd.concat([own, spans_from_steps(steps)], ignore_index=True)
        events += _run_events(pid, run, steps, own)
    window = "every step" if ranges is not None else "the window of steps results.json keeps"
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "generator": "bubblelab export",
            "time": "microseconds from each run's first event",
            "host ranges": window,
            **({"kernels, copies and CUDA API calls": ops} if ops else {}),
        },
    }


def write_chrome_trace(trace: dict, path: Path) -> Path:
    """Write the trace as JSON, gzipped when the name ends in .gz (both viewers open either)."""
    text = json.dumps(trace, separators=(",", ":"), allow_nan=False).encode()
    # level 6: a million events in 0.75 s against 2.0 s at 9, for 8% more bytes
    packed = gzip.compress(text, compresslevel=6, mtime=0) if path.suffix == ".gz" else text
    return write_atomic(path, packed)


def _run_events(pid: int, run: dict, steps: pd.DataFrame, ranges: pd.DataFrame) -> list[dict]:
    starts = [ranges["start_ns"].min() if len(ranges) else math.inf, steps["gpu_start_ns"].min()]
    t0 = min(s for s in starts if pd.notna(s))
    kinds = steps.set_index("step")["kind"].to_dict()
    device = device_word([run.get("device")])
    meta = [
        _meta(pid, None, "process_name", name=run["run_name"]),
        _meta(pid, None, "process_labels", labels=f"run {run['run_id']}"),
        _meta(pid, None, "process_sort_index", sort_index=pid),
    ]
    slices: list[dict] = []
    rank_of = _ranks(ranges)
    ranks = sorted(set(rank_of)) or [0]
    for rank in ranks:
        mine = ranges[rank_of == rank]
        base, prefix = rank * RANK_TIDS, f"rank {rank} " if len(ranks) > 1 else ""
        host = mine[mine["lane"] == "host"]
        tids = host["tid"] if "tid" in host else pd.Series(dtype=float)
        threads = list(dict.fromkeys(tids.dropna())) or ([None] if len(host) else [])
        for i, thread in enumerate(threads):
            rows = host if thread is None else host[host["tid"] == thread]
            name = "host" if len(threads) == 1 else f"host thread {int(thread)}"
            slices += _track(pid, base + HOST_TID + 10 * i, prefix + name, rows, t0, meta, None)
        if (waits := mine[mine["lane"] == "wait"]).size:
            slices += _track(pid, base + WAIT_TID, prefix + "host waits", waits, t0, meta, None)
        gpu = mine[mine["lane"] == "gpu"]
        slices += _track(pid, base + DEVICE_TID, prefix + device, gpu, t0, meta, kinds=kinds)
        flows = (pid * 64 + rank) << 32  # flow ids: a launch's correlation id, unique per run/rank
        for lane, (first, label) in OP_TRACKS.items():
            rows = mine[mine["lane"] == lane]
            if rows.empty:  # none recorded (results.json's ranges): no tracks
                continue
            for i, (key, group) in enumerate(rows.groupby("tid", sort=True)):
                number = int(key) % 2**24 if lane == "api" else int(key)  # nsys globalTid: tid bits
                tid, name = base + first + 2 * i, f"{prefix}{label} {number}"
                slices += _track(pid, tid, name, group, t0, meta, None, flows)
    periods = steps.assign(
        start_ns=steps["gpu_start_ns"],
        end_ns=steps["gpu_start_ns"] + steps["period_ms"].fillna(0) * 1e6,
    )
    periods = periods.dropna(subset=["start_ns", "period_ms"])
    meta.append(_meta(pid, STEPS_TID, "thread_name", name="steps"))
    meta.append(_meta(pid, STEPS_TID, "thread_sort_index", sort_index=STEPS_TID))
    for step in periods.to_dict("records"):
        args = {"step": int(step["step"]), **{k: _plain(step.get(k)) for k in STEP_ARGS}}
        slices.append(_slice(pid, STEPS_TID, str(step["kind"]), step, t0, args))
    return meta + slices


def _ranks(ranges: pd.DataFrame) -> pd.Series:
    """Each row's rank: 0 where the run ran on one GPU (no rank column) or the row names none."""
    if "rank" not in ranges:
        return pd.Series(0, index=ranges.index, dtype=int)
    return pd.to_numeric(ranges["rank"], errors="coerce").fillna(0).astype(int)


def _track(
    pid: int,
    tid: int,
    name: str,
    rows: pd.DataFrame,
    t0: float,
    meta: list[dict],
    kinds: dict | None,
    flows: int | None = None,
) -> list[dict]:
    """One lane's slices, on as many tracks as needed: a slice that overlaps one before it without
    nesting inside it (which one thread's slices must) goes to the next track of the lane. flows:
    rows with a `flow` ('out': a launch call, 'in': the first op it launched) carry the flow
    (bind_id flows + their correlation id, the trace event format's flow_out/flow_in).

    Column by column, not row by row: a sweep's lanes of kernels and CUDA calls hold a million
    rows, and a dict per row from pandas was most of the report's time."""
    rows = rows.dropna(subset=["start_ns", "end_ns"])  # a span the step did not have
    if kinds is not None:  # the device lane: a part the step did not run (no sampling) is no span
        rows = rows[rows["end_ns"] > rows["start_ns"]]
    rows = rows.sort_values(["start_ns", "end_ns"], ascending=[True, False])
    starts = rows["start_ns"].astype(float).tolist()
    ends = [max(e, s) for e, s in zip(rows["end_ns"].astype(float).tolist(), starts, strict=True)]
    tracks = _tracks(starts, ends)
    phases = rows["phase"].astype(str).tolist()
    steps = (
        [None if pd.isna(v) else int(v) for v in rows["step"]]
        if "step" in rows
        else [None] * len(phases)
    )
    if kinds is not None:
        phases = [
            "prefill" if phase == "forward" and kinds.get(step) == "prefill" else phase
            for phase, step in zip(phases, steps, strict=True)
        ]
    out = [
        {
            "ph": "X",
            "name": phase,
            "pid": pid,
            "tid": tid + track,
            "ts": ts,
            "dur": round(max(end - start, 0.0) / 1e3, 3),
            "args": {"step": step},
        }
        for phase, track, ts, start, end, step in zip(
            phases,
            tracks,
            _offsets_us(starts, t0),
            starts,
            ends,
            steps,
            strict=True,
        )  # fmt: skip
    ]
    if flows is not None and "flow" in rows:
        for event, flow, correlation in zip(
            out, rows["flow"].tolist(), rows["correlation_id"].tolist(), strict=True
        ):
            if isinstance(flow, str):
                event["args"]["correlation_id"] = int(correlation)
                event.update({"bind_id": flows + int(correlation), f"flow_{flow}": True})
    for track in range(max(1, max(tracks, default=0) + 1)):
        label = name if track == 0 else f"{name} ({track + 1})"
        meta.append(_meta(pid, tid + track, "thread_name", name=label))
        meta.append(_meta(pid, tid + track, "thread_sort_index", sort_index=tid + track))
    return out


def _offsets_us(starts: list[float], t0: float) -> list[float]:
    """Each start in microseconds after t0, to the nanosecond: _slice's arithmetic (numpy's rounding
    where t0 is a numpy number, as it is from a table), on the whole column at once."""
    if isinstance(t0, np.generic):
        return np.round((np.asarray(starts, dtype=float) - t0) / 1e3, 3).tolist()
    return [round((start - t0) / 1e3, 3) for start in starts]


def _tracks(starts: list[float], ends: list[float]) -> list[int]:
    """Each slice's track (_place, in start order). Most lanes (a stream's kernels, a thread's
    CUDA calls) never overlap: one track, found without placing them one by one."""
    if all(s >= e for s, e in zip(starts[1:], itertools.accumulate(ends, max), strict=False)):
        return [0] * len(starts)
    stacks: list[list[float]] = []  # per track: the ends of its open slices
    return [_place(stacks, start, end) for start, end in zip(starts, ends, strict=True)]


def _place(stacks: list[list[float]], start: float, end: float) -> int:
    """The first track where [start, end) nests (inside its innermost open slice, or on an empty
    track), its open slices that ended before start closed; a new track if none."""
    for track, stack in enumerate(stacks):
        while stack and stack[-1] <= start:
            stack.pop()
        if not stack or end <= stack[-1]:
            stack.append(end)
            return track
    stacks.append([end])
    return len(stacks) - 1


def _slice(pid: int, tid: int, name: str, row: dict, t0: float, args: dict) -> dict:
    start, end = float(row["start_ns"]), float(row["end_ns"])
    return {
        "ph": "X",
        "name": name,
        "pid": pid,
        "tid": tid,
        "ts": round((start - t0) / 1e3, 3),
        "dur": round(max(end - start, 0.0) / 1e3, 3),
        "args": args,
    }


def _meta(pid: int, tid: int | None, what: str, **args: object) -> dict:
    event = {"ph": "M", "name": what, "pid": pid, "args": args}
    if tid is not None:
        event["tid"] = tid
    return event


def _plain(value: object) -> object:
    """A JSON-ready scalar: numpy numbers as Python ones, NaN as null."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if hasattr(value, "item"):
        value = value.item()
        if isinstance(value, float) and math.isnan(value):
            return None
    return value
