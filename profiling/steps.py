"""Where are the steps of a trace bubblelab did not make? The rules, in order, and how sure they
are.

1. bubblelab: our NVTX ranges (domain `bubblelab`, step id as payload; docs/phases.md). ingest.py
   handles these runs the old way; everything below is for the others ("foreign" runs).
2. nvtx: a range the user names (`--step-range REGEX`), e.g. one `nvtx.annotate` around an engine's
   step function, in any domain (sql/step_range_matches.sql).
3. From the trace itself, on the engine thread (the thread that launched the most GPU work):
   - sync: the host sync point that closes each step (sql/sync_points.sql). A step ends when the
     host reads its tokens back, so when at least MIN_STEPS points read (launched a device-to-host
     copy), the others close no step: they waited for nothing the host reads (transformers'
     `generate` syncs after an 8-byte upload in each layer of its prefill, which would otherwise cut
     the prefill into 28 one-layer "steps"). A blocking engine waits for each step's tokens once; an
     engine that waits more often (nano-vllm-fork: a `.item()` per sequence) is told apart by what
     the host does after each wait: after the closing one it does the step's bookkeeping (~1 ms)
     before launching again, after the others it launches at once (tens of us). The closing points
     are those above the largest jump (>= SPLIT_RATIO x) in the sorted host gaps, provided they
     recur in a regular pattern; otherwise every (reading) point closes a step.
   - graph: one CUDA-graph replay per step (the replays of the largest graphs, so a small sampling
     graph beside the forward's does not count twice).
   With both available, the rule whose steps hold more of the GPU's time and come more regularly
   wins (coverage - spread of the step windows); `StepOptions.rule` forces one.
Fewer than MIN_STEPS steps is an error naming what the trace holds instead.

Every GPU op then belongs to the step whose host window holds its launching call
(sql/step_assignment.sql), and sql/foreign_per_step.sql builds the per-step table. `step_summary`
says how sure it all is.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import duckdb
import numpy as np
import pandas as pd

from ..core.checks import check_choice, check_float
from ..core.errors import BubblelabError
from . import queries
from .catalog import one_row

RULES = ("auto", "sync", "graph")
MIN_STEPS = 3
GAP_THRESHOLD_US = 5.0  # twice the ~2.5 us launch floor between back-to-back kernels on the H200
SPLIT_RATIO = 4.0  # host gap jump that separates a step's closing sync from its other syncs
GRAPH_SHARE = 0.5  # graphs with fewer nodes than this share of the largest are side graphs


@dataclass(frozen=True)
class StepOptions:
    """How to find the steps of a trace without bubblelab's ranges (CLI: --step-range, --step-rule,
    --gap-threshold-us)."""

    step_range: str | None = None  # regex (RE2, searched) naming the NVTX range around one step
    rule: str = "auto"  # auto | sync | graph, when no step_range is given
    gap_threshold_us: float = (
        GAP_THRESHOLD_US  # idle shorter than this is a kernel gap, longer is bubble
    )

    def __post_init__(self) -> None:
        # Named as the CLI's options, whose values these are.
        check_choice("step_rule", self.rule, RULES)
        check_float("gap_threshold_us", self.gap_threshold_us, 0, 1e6, lo_open=True)
        if self.step_range is not None:
            try:
                re.compile(self.step_range)
            except re.error as e:
                raise BubblelabError(
                    f"--step-range {self.step_range!r} is not a regex ({e})"
                ) from None

    @property
    def gap_ns(self) -> int:
        return round(self.gap_threshold_us * 1e3)


@dataclass
class Candidate:
    """Step windows one rule proposes: CUDA calls starting in [host_start, host_end) belong to the
    step."""

    rule: str
    detail: str
    windows: pd.DataFrame  # step, host_start, host_end
    score: float = -math.inf


def find_steps(
    con: duckdb.DuckDBPyConnection,
    run_id: str,
    part: tuple[int | None, int | None],
    options: StepOptions,
    what: str,
) -> Candidate:
    """Find a foreign run's steps (its gpu_ops and api_calls ingested, the trace attached as `ns`),
    store them (step_windows, step_rules, the step of every call, op and sync point) and return the
    rule used. part: the run's (globalPid, deviceId), None for all; `what` starts every error line
    (the trace)."""
    pid, device = part
    tid = _engine_thread(con, run_id, what)
    queries.execute(con, "sync_points", {"run_id": run_id, "tid": tid})
    launches = con.execute(
        "SELECT DISTINCT launched_at FROM gpu_ops WHERE run_id = ? AND launched_at IS NOT NULL "
        "ORDER BY 1",
        [run_id],
    ).fetchnumpy()["launched_at"]
    if options.step_range is not None:
        chosen = _from_ranges(con, pid, options.step_range, what)
    else:
        chosen = _from_trace(con, run_id, tid, launches, options.rule, what)
    windows = _with_work(chosen.windows, launches)
    con.register("new_windows", windows.assign(run_id=run_id))
    try:
        con.execute(
            "INSERT INTO step_windows SELECT run_id, step, host_start, host_end FROM new_windows"
        )
    finally:
        con.unregister("new_windows")
    con.execute(
        "INSERT INTO step_rules VALUES (?, ?, ?, ?, ?, ?, ?)",
        [run_id, chosen.rule, chosen.detail, pid, device, tid, options.gap_ns],
    )
    queries.execute(con, "step_assignment", {"run_id": run_id})
    return chosen


def closing_points(points: pd.DataFrame) -> pd.DataFrame:
    """The sync points (start, end, reads, next_launch) that close a step (module docstring, rule
    'sync')."""
    reading = points[points["reads"] > 0]
    if len(reading) >= MIN_STEPS:
        points = reading
    gaps = np.maximum((points["next_launch"] - points["end"]).to_numpy(float), 1e3)
    known = np.sort(np.log(gaps[~np.isnan(gaps)]))
    if len(known) >= 2:
        jumps = np.diff(known)
        i = int(np.argmax(jumps))
        if jumps[i] >= math.log(SPLIT_RATIO):
            closing = np.isnan(gaps) | (gaps >= math.exp(known[i + 1]) * (1 - 1e-9))
            if closing.sum() >= MIN_STEPS and _regular(closing):
                return points[closing]
    return points


def _regular(closing: np.ndarray) -> bool:
    """Do the other points recur in a fixed pattern between closing ones (most steps the same
    count)? A few slow bookkeeping rounds (a GC pause) among one-sync steps do not."""
    between = np.diff(np.flatnonzero(closing)) - 1
    return len(between) > 0 and np.bincount(between).max() >= 0.5 * len(between)


def _engine_thread(con: duckdb.DuckDBPyConnection, run_id: str, what: str) -> int:
    row = queries.run(con, "engine_thread", {"run_id": run_id})
    if row.empty:
        raise BubblelabError(
            f"{what}: cannot find the steps: no GPU op could be matched to the CUDA call that "
            "launched it "
            "(was the CUDA API traced, nsys -t cuda?)"
        )
    return int(row["tid"].iloc[0])


def _from_ranges(
    con: duckdb.DuckDBPyConnection, pid: int | None, regex: str, what: str
) -> Candidate:
    if not _has_nvtx(con):
        raise BubblelabError(f"{what}: --step-range {regex!r}: the trace holds no NVTX events")
    try:
        windows = queries.run(con, "step_range_matches", {"pid": pid, "regex": regex})
    except duckdb.Error as e:
        raise BubblelabError(
            f"--step-range {regex!r}: not a regex DuckDB (RE2) reads ({str(e).splitlines()[0]})"
        ) from None
    if windows.empty:
        raise BubblelabError(
            f"{what}: --step-range {regex!r} matches no NVTX range; {_ranges_found(con, pid)}"
        )
    return Candidate("nvtx", regex, windows[["step", "host_start", "host_end"]])


def _from_trace(
    con: duckdb.DuckDBPyConnection,
    run_id: str,
    tid: int,
    launches: np.ndarray,
    rule: str,
    what: str,
) -> Candidate:
    points = con.execute(
        'SELECT start, "end", reads, next_launch FROM sync_points WHERE run_id = ? ORDER BY start',
        [run_id],
    ).df()
    graphs = queries.run(con, "graph_launches", {"run_id": run_id, "tid": tid})
    candidates = []
    if rule in ("auto", "sync") and len(points):
        closing = closing_points(points)
        ends = closing["end"].to_numpy()
        starts = np.concatenate([[launches[0] if len(launches) else ends[0]], ends[:-1]])
        per_step = len(points) / len(closing)
        # the reads a step name what the sync inventory counts: a point holds every wait with
        # nothing launched between, so the fork's 128 `.item()` calls are one point, 128 reads
        reads = points["reads"].sum() / len(closing)
        skipped = int((points["reads"] == 0).sum()) if closing["reads"].all() else 0
        candidates.append(
            Candidate(
                "sync",
                f"the host sync closing each step ({len(closing)} of {len(points)} sync points "
                f"on thread {tid & 0xFFFFFF}, {per_step:.3g} a step, {reads:.3g} device-to-host "
                "reads a step"
                + (f"; {skipped} read nothing back and close no step" if skipped else "")
                + ")",
                _windows(starts, ends),
            )
        )
    if rule in ("auto", "graph") and len(graphs):
        big = graphs[graphs["ops"] >= GRAPH_SHARE * graphs["ops"].max()]["start"].to_numpy()
        candidates.append(
            Candidate(
                "graph",
                f"one CUDA-graph replay a step ({len(big)} replays of graphs with >= "
                f"{math.ceil(GRAPH_SHARE * graphs['ops'].max())} nodes)",
                _windows(big[:-1], big[1:]),
            )
        )
    viable = [c for c in candidates if len(_with_work(c.windows, launches)) >= MIN_STEPS]
    if not viable:
        forced = "" if rule == "auto" else f" (--step-rule {rule})"
        raise BubblelabError(
            f"{what}: cannot find the steps{forced}: no bubblelab ranges, no --step-range, and on "
            "the "
            f"engine thread {tid & 0xFFFFFF} "
            f"{len(graphs)} CUDA-graph replays and {len(points)} host sync points give fewer than "
            f"{MIN_STEPS} steps; {_ranges_found(con, None)}"
        )
    for c in viable:
        span = {
            "first": int(c.windows["host_start"].min()),
            "last": int(c.windows["host_end"].max()),
        }
        coverage = queries.run(con, "window_coverage", {"run_id": run_id, **span}).iloc[0, 0]
        c.score = float(coverage) - _spread(c.windows)
    return max(viable, key=lambda c: (c.score, c.rule == "sync"))


def _windows(starts: np.ndarray, ends: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame(
        {"step": np.arange(len(starts)), "host_start": starts, "host_end": ends}
    ).astype("int64")


def _with_work(windows: pd.DataFrame, launches: np.ndarray) -> pd.DataFrame:
    """The windows in which the engine launched something, renumbered from 0."""
    first = np.searchsorted(launches, windows["host_start"].to_numpy(), side="left")
    past = np.searchsorted(launches, windows["host_end"].to_numpy(), side="left")
    kept = windows[past > first].reset_index(drop=True)
    return kept.assign(step=np.arange(len(kept), dtype="int64"))


def _spread(windows: pd.DataFrame) -> float:
    """Robust coefficient of variation of the window lengths (prefill outliers do not count)."""
    lengths = (windows["host_end"] - windows["host_start"]).to_numpy(float)
    median = float(np.median(lengths)) if len(lengths) else 0.0
    return 1.4826 * float(np.median(np.abs(lengths - median))) / median if median > 0 else math.inf


def _has_nvtx(con: duckdb.DuckDBPyConnection) -> bool:
    return bool(
        con.execute(
            "SELECT 1 FROM duckdb_tables() WHERE database_name = 'ns' AND table_name = "
            "'NVTX_EVENTS'"
        ).fetchone()
    )


def _ranges_found(con: duckdb.DuckDBPyConnection, pid: int | None) -> str:
    if not _has_nvtx(con):
        return "the trace holds no NVTX events"
    counts = queries.run(con, "nvtx_range_counts", {"pid": pid})
    if counts.empty:
        return "the trace holds no NVTX ranges"
    names = ", ".join(f"{n!r} x{c}" for n, c in zip(counts["name"], counts["ranges"], strict=True))
    return f"its most frequent NVTX ranges: {names} (name the step's range with --step-range REGEX)"


def step_summary(
    con: duckdb.DuckDBPyConnection, run_id: str, steps: pd.DataFrame, steady: pd.DataFrame
) -> dict:
    """How the run's steps were found and how sure that is: the rule, steps found (decode,
    prefill-like), the coefficient of variation of the steady steps' periods (how regular the steps
    are; `steady` is core.steady.steady_state of `steps`), the share of the GPU's time inside found
    steps, and a word for it (high: CV <= 0.15 and >= 80% covered; medium: CV <= 0.5 and >= 50%;
    else low)."""
    found = con.execute(
        "SELECT rule, detail, pid, engine_tid, gap_threshold_ns FROM step_rules WHERE run_id = ?",
        [run_id],
    ).fetchone()
    default = ("bubblelab", "NVTX ranges of domain bubblelab", None, None, None)
    rule, detail, pid, tid, gap_ns = found or default
    covered, total = one_row(
        con,
        'SELECT sum("end" - start) FILTER (step IS NOT NULL), sum("end" - start) FROM gpu_ops '
        "WHERE run_id = ?",
        [run_id],
    )
    periods = steady["period_ms"].dropna()
    cv = float(periods.std(ddof=0) / periods.mean()) if len(periods) >= 2 else None
    coverage = float((covered or 0) / total) if total else None  # no op inside a step: 0
    high = cv is not None and coverage is not None and cv <= 0.15 and coverage >= 0.8
    medium = cv is not None and coverage is not None and cv <= 0.5 and coverage >= 0.5
    return {
        "rule": rule,
        "detail": detail,
        "pid": None if pid is None else int(pid) >> 24 & 0xFFFFFF,
        "engine_tid": None if tid is None else int(tid) & 0xFFFFFF,
        "steps": int(len(steps)),
        "decode_steps": int((steps["kind"] == "decode").sum()),
        "prefill_steps": int((steps["kind"] == "prefill").sum()),
        "period_cv": None if cv is None else round(cv, 6),
        "gpu_coverage": None if coverage is None else round(coverage, 6),
        "confidence": "high" if high else "medium" if medium else "low",
        "gap_threshold_us": None if gap_ns is None else gap_ns / 1e3,
    }
