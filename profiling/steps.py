"""Where are the steps of a trace bubblelab did not make? Every rule that applies, tried; the
evidence picks one (profiling/evidence.py).

1. bubblelab: our NVTX ranges (domain `bubblelab`, step id as payload; docs/phases.md). ingest.py
   handles these runs the old way; everything below is for the others ("foreign" runs).
2. nvtx: a range the user names (`--step-range REGEX`), e.g. one `nvtx.annotate` around an engine's
   step function, in any domain (sql/step_range_matches.sql).
3. From the trace itself, on the engine thread (the thread that launched the most GPU work), three
   rules, each a guess at what repeats once a token:
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
   - graph: one CUDA-graph replay per step (the replays of the largest graphs, by their graph's
     nodes, so a replay the capture cut short still counts, or by their GPU time where replays were
     traced whole, so a small sampling graph beside the forward's does not count twice).
   - pause: the host's pause before each step's first launch (sql/launch_pauses.sql): where the
     engine thread stopped launching to wait for the tokens, inside the CUDA API or outside it
     (a futex, a host callback: JAX waits there), and did its bookkeeping. The pauses above a jump
     (>= SPLIT_RATIO x) in their sorted lengths open steps, the highest such cut whose steps repeat
     one pattern (most hold the same number of launches). It finds a step made of several graph
     replays or of several syncs, where the other two count each one.
   Each rule's last step runs from its last boundary to the last launch (a capture cut mid-step
   ends there). `StepOptions.rule` forces one; otherwise evidence.choose weighs them.
Fewer than MIN_STEPS steps by every rule is an error naming what the trace holds instead.

Every GPU op then belongs to the step whose host window holds its launching call
(sql/step_assignment.sql), and sql/foreign_per_step.sql builds the per-step table.
evidence.step_summary says how sure it all is.
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
from . import evidence, queries

RULES = ("auto", "sync", "graph", "pause")
MIN_STEPS = 3
GAP_THRESHOLD_US = 5.0  # twice the ~2.5 us launch floor between back-to-back kernels on the H200
SPLIT_RATIO = 4.0  # host gap jump that separates a step's closing sync (or pause) from the others
GRAPH_SHARE = 0.5  # graphs with fewer nodes than this share of the largest are side graphs
MIN_PAUSE_NS = 1_000  # shorter pauses count as this long (a launch's own jitter is not a pause)


@dataclass(frozen=True)
class StepOptions:
    """How to find the steps of a trace without bubblelab's ranges (CLI: --step-range, --step-rule,
    --gap-threshold-us)."""

    step_range: str | None = None  # regex (RE2, searched) naming the NVTX range around one step
    rule: str = "auto"  # auto | sync | graph | pause, when no step_range is given
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
    """Step windows one rule proposes (CUDA calls starting in [host_start, host_end) belong to the
    step; only windows in which something was launched), and the evidence for them
    (evidence.measure)."""

    rule: str
    detail: str
    windows: pd.DataFrame  # step, host_start, host_end
    coverage: float = math.nan  # share of the GPU's time launched inside the windows
    spread: float = math.nan  # robust CV of the windows' lengths
    read_share: float = math.nan  # share of the windows holding a device-to-host read
    repeat_share: float = math.nan  # share of the windows launching the same work

    @property
    def steps(self) -> int:
        return len(self.windows)

    @property
    def window_ms(self) -> float:
        lengths = self.windows["host_end"] - self.windows["host_start"]
        return float(lengths.median()) / 1e6 if len(lengths) else math.nan

    @property
    def score(self) -> float:
        """More of the GPU's time inside the steps, and steps of more regular length."""
        return self.coverage - self.spread


def find_steps(
    con: duckdb.DuckDBPyConnection,
    run_id: str,
    part: tuple[int | None, int | None],
    options: StepOptions,
    what: str,
) -> Candidate:
    """Find a foreign run's steps (its gpu_ops and api_calls ingested, the trace attached as `ns`),
    store them (step_windows, step_rules, step_candidates, the step of every op and sync point)
    and return the rule used. part: the run's (globalPid, deviceId), None for all; `what` starts
    every error line (the trace)."""
    pid, device = part
    tid = _engine_thread(con, run_id, what)
    queries.execute(con, "sync_points", {"run_id": run_id, "tid": tid})
    launches = con.execute(
        "SELECT DISTINCT launched_at FROM gpu_ops WHERE run_id = ? AND launched_at IS NOT NULL "
        "ORDER BY 1",
        [run_id],
    ).fetchnumpy()["launched_at"]
    candidates, seen = _from_trace(con, run_id, tid, launches)
    chosen = None
    if options.step_range is not None:
        chosen = _from_ranges(con, pid, options.step_range, what, launches)
        candidates.insert(0, chosen)
    evidence.measure(con, run_id, candidates, launches)
    if chosen is None:
        forced = None if options.rule == "auto" else options.rule
        viable = [c for c in candidates if forced in (None, c.rule)]
        if not viable:
            held = seen[forced] if forced else f"{seen['graph']} and {seen['sync']}"
            raise BubblelabError(
                f"{what}: cannot find the steps{f' (--step-rule {forced})' if forced else ''}: "
                f"no bubblelab ranges, no --step-range, and on the engine thread {tid & 0xFFFFFF} "
                f"{held} give fewer than {MIN_STEPS} steps"
                + ("" if forced else ", and no pause between its launches recurs once a step")
                + f"; {_ranges_found(con, None)}"
            )
        chosen = viable[0] if forced else evidence.choose(viable)
    con.register("new_windows", chosen.windows.assign(run_id=run_id))
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
    con.executemany(
        "INSERT INTO step_candidates VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            [
                run_id,
                c.rule,
                c.detail,
                c.steps,
                c.window_ms,
                c.spread,
                c.coverage,
                c.read_share,
                c.repeat_share,
                c is chosen,
            ]  # fmt: skip
            for c in candidates
        ],
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


def pause_openers(pauses: np.ndarray) -> tuple[np.ndarray, float] | None:
    """Which launches open a step by the pause rule (module docstring), and the shortest pause that
    does: the highest cut above a >= SPLIT_RATIO jump in the sorted pauses whose steps repeat one
    pattern; None if no cut does. pauses: before each launch in time order (NaN for the first)."""
    lengths = np.maximum(np.nan_to_num(pauses, nan=np.inf), MIN_PAUSE_NS)
    known = np.unique(np.log(lengths[np.isfinite(lengths)]))
    jumps = np.flatnonzero(np.diff(known) >= math.log(SPLIT_RATIO))
    for i in jumps[::-1]:  # the highest cut first: a step's own pauses lie below it
        cut = math.exp(known[i + 1]) * (1 - 1e-9)
        opens = lengths >= cut
        if opens.sum() >= MIN_STEPS and _regular(opens):
            return opens, cut
    return None


def _regular(marks: np.ndarray) -> bool:
    """Do the unmarked events recur in a fixed pattern between marked ones (most steps the same
    count)? A few slow bookkeeping rounds (a GC pause) among one-sync steps do not."""
    between = np.diff(np.flatnonzero(marks)) - 1
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
    con: duckdb.DuckDBPyConnection, pid: int | None, regex: str, what: str, launches: np.ndarray
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
    windows = _with_work(windows[["step", "host_start", "host_end"]], launches)
    return Candidate("nvtx", regex, windows)


def _from_trace(
    con: duckdb.DuckDBPyConnection, run_id: str, tid: int, launches: np.ndarray
) -> tuple[list[Candidate], dict[str, str]]:
    """Every rule's steps with at least MIN_STEPS of them, and what each rule had to go on (for an
    error line)."""
    points = con.execute(
        'SELECT start, "end", reads, next_launch FROM sync_points WHERE run_id = ? ORDER BY start',
        [run_id],
    ).df()
    graphs = queries.run(con, "graph_launches", {"run_id": run_id, "tid": tid})
    pauses = queries.run(con, "launch_pauses", {"run_id": run_id, "tid": tid})
    last = launches[-1] + 1 if len(launches) else 0  # a rule's last step runs to here
    candidates = []
    if len(points):
        closing = closing_points(points)
        ends = closing["end"].to_numpy()
        starts = np.concatenate([[launches[0] if len(launches) else ends[0]], ends])
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
                _windows(starts, np.append(ends, max(last, ends[-1])), launches),
            )
        )
    if len(graphs):
        # a replay's size: its graph's nodes; traced whole (one op each), its GPU time
        whole = graphs["ops"].max() == 1
        size = graphs["gpu_ns"] if whole else graphs["graph_ops"]
        big = graphs[size >= GRAPH_SHARE * size.max()]["start"].to_numpy()
        least = (
            f"{GRAPH_SHARE * size.max() / 1e3:.0f} us on the GPU"
            if whole
            else f"{math.ceil(GRAPH_SHARE * size.max())} nodes"
        )
        candidates.append(
            Candidate(
                "graph",
                f"one CUDA-graph replay a step ({len(big)} replays of graphs with >= {least})",
                _windows(big, np.append(big[1:], max(last, big[-1])), launches),
            )
        )
    found = pause_openers(pauses["pause"].to_numpy(float)) if len(pauses) else None
    if found is not None:
        opens, cut = found
        starts = pauses["start"].to_numpy()[opens]
        candidates.append(
            Candidate(
                "pause",
                f"the host's pause before each step's first launch ({opens.sum()} pauses of >= "
                f"{cut / 1e3:.0f} us on thread {tid & 0xFFFFFF}, "
                f"{len(pauses) / opens.sum():.3g} launching calls a step)",
                _windows(starts, np.append(starts[1:], max(last, starts[-1])), launches),
            )
        )
    seen = {  # what each rule had to go on, for an error line
        "sync": f"{len(points)} host sync points",
        "graph": f"{len(graphs)} CUDA-graph replays",
        "pause": f"the pauses between {len(pauses)} launching calls",
    }
    return [c for c in candidates if c.steps >= MIN_STEPS], seen


def _windows(starts: np.ndarray, ends: np.ndarray, launches: np.ndarray) -> pd.DataFrame:
    windows = pd.DataFrame(
        {"step": np.arange(len(starts)), "host_start": starts, "host_end": ends}
    ).astype("int64")
    return _with_work(windows, launches)


def _with_work(windows: pd.DataFrame, launches: np.ndarray) -> pd.DataFrame:
    """The windows in which the engine launched something, renumbered from 0."""
    first = np.searchsorted(launches, windows["host_start"].to_numpy(), side="left")
    past = np.searchsorted(launches, windows["host_end"].to_numpy(), side="left")
    kept = windows[past > first].reset_index(drop=True)
    return kept.assign(step=np.arange(len(kept), dtype="int64"))


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
