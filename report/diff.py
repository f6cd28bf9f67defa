"""Two traces or two run directories step by step (`bubblelab compare A B`): the steady-state step,
where the bubble went, and (where both have a catalog) the kernels, side by side with B − A.

Runs pair by configuration and depth (report.labels.run_name); two sources that share none (a
depth-1 trace against a depth-2 trace, two engines) pair run by run in order. Repeats of a
configuration count as one: the median of their steady-state medians. A blocking trace of our
engine against a pipelined trace of the same configuration also checks the forecast: the step
A's trace alone foresees at depth 2 against the step B measured (`foreseen`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..costmodel.compare import step_summary
from ..profiling.analysis import kernel_summary
from ..runs.analysis import checked_forecast
from ..runs.merge import distinct_names
from ..runs.sources import Source, open_source
from .summary import attribution_per_step

METRICS = (
    "steps",
    "batch",
    "forward_ms",
    "kernel_gap_ms",
    "bubble_ms",
    "period_ms",
    "tokens_per_s",
)
TOP_KERNELS = 10  # per pair of runs, by the larger of the two times


@dataclass
class Comparison:
    names: tuple[str, str]  # A's and B's, as the tables' columns say "a" and "b"
    steps: pd.DataFrame  # pair, metric, a, b, diff, diff_pct
    attribution: pd.DataFrame  # pair, phase, a, b, diff: bubble ms per steady step (time split)
    kernels: pd.DataFrame  # pair, kernel, a, b, diff: GPU ms per step; empty without catalogs
    runs: list[tuple[str, str, str]]  # each pair, and the run of A and of B it sets side by side
    foreseen: list[dict]  # A's forecast of B's step, where A and B are depth 1 and 2 (_foreseen)

    def to_dict(self) -> dict:
        return {
            "a": self.names[0],
            "b": self.names[1],
            **{
                name: getattr(self, name).to_dict("records")
                for name in ("steps", "attribution", "kernels")
            },
            "pairs": [{"pair": pair, "a": ra, "b": rb} for pair, ra, rb in self.runs],
            "foreseen": self.foreseen,
        }


def compare(a: Path | str, b: Path | str) -> Comparison:
    """Open two traces or run directories (runs.sources) and compare them."""
    first, second = open_source(a), open_source(b)
    first.name, second.name = distinct_names([Path(a), Path(b)])
    return compare_sources(first, second)


def compare_sources(a: Source, b: Source) -> Comparison:
    summaries = [_summary(s) for s in (a, b)]
    pairs = _pairs(*summaries)
    steps = _side_by_side(
        [
            (pair, metric, ra[metric], rb[metric])
            for pair, ra, rb in pairs
            for metric in METRICS
            if metric in ra and metric in rb
        ],
        "metric",
    )
    steps["diff_pct"] = 100 * steps["diff"] / steps["a"].where(steps["a"] != 0)
    attribution = [attribution_per_step(s.results) for s in (a, b)]
    phases = []
    for pair, ra, rb in pairs:
        ma, mb = (_by_phase(t, r) for t, r in zip(attribution, (ra, rb), strict=True))
        phases += [(pair, p, ma.get(p, 0.0), mb.get(p, 0.0)) for p in dict.fromkeys([*ma, *mb])]
    kernels = []
    if a.catalog is not None and b.catalog is not None:
        for pair, ra, rb in pairs:
            ka, kb = _kernels(a, ra), _kernels(b, rb)
            both = pd.concat([ka, kb], axis=1, keys=["a", "b"]).fillna(0.0)
            top = both.max(axis=1).sort_values(ascending=False).index[:TOP_KERNELS]
            kernels += [(pair, k, both.at[k, "a"], both.at[k, "b"]) for k in top]
    return Comparison(
        (a.name, b.name),
        steps,
        _side_by_side(phases, "phase"),
        _side_by_side(kernels, "kernel"),
        [(pair, ra["label"], rb["label"]) for pair, ra, rb in pairs],
        _foreseen(a, b, pairs),
    )


def figure(value: float | None, signed: bool = False, whole: bool = False) -> str:
    """One cell of the comparison, the same in the terminal and on the page: a count or a figure
    of 1,000 or more whole (or any, `whole`), anything else to the microsecond of a ms (3
    decimals), never in scientific notation; '–' where one side has no such figure."""
    if value is None or pd.isna(value):
        return "–"
    decimals = 0 if whole or float(value).is_integer() or abs(value) >= 1000 else 3
    return f"{value:{'+' if signed and value else ''},.{decimals}f}"


def row_figures(row: dict) -> tuple[str, str, str]:
    """A row's A, B and B − A cells, alike: whole when either side is 1,000 or more (tokens/s
    1,936 → 1,460 is -476, not -476.284)."""
    sides = [v for v in (row["a"], row["b"]) if v is not None and not pd.isna(v)]
    whole = any(abs(v) >= 1000 for v in sides)
    return (
        figure(row["a"], whole=whole),
        figure(row["b"], whole=whole),
        figure(row["diff"], signed=True, whole=whole),
    )


# where a `foreseen` entry's zombie tax came from (its z_source), said alike in the terminal and on
# the pages; a guess from the trace's length is named as one (costmodel.foreign_zombies)
Z_FROM = {
    "given": "1/L, L the requests' mean generated length recorded with it",
    "one batch": "1/L, L its decode steps + 1: one batch from start to end",
    "trace length (a guess)": "1/L, L its decode steps + 1, a guess: requests joined mid-run",
    "none": "no zombies",
}


def z_words(entry: dict, whose: str = "A's trace") -> str:
    """'z = 0.0085 from A's trace: 1/L, ...': a `foreseen` entry's zombie tax and its source."""
    how = Z_FROM.get(str(entry.get("z_source")))
    return f"z = {entry['z']:.4f} from {whose}" + (f": {how}" if how else "")


# the `foreseen` rows' last, said alike in the terminal and on the page
KEPT_GPU_WORK = "GPU work: the forecast keeps A's; B's grows where a GPU kept busy lowers its clock"


def foreseen_rows(entry: dict) -> list[tuple[str, str, str, str]]:
    """A `foreseen` entry's rows, alike in the terminal and on the page: what, foreseen from A,
    measured in B, B − foreseen; ~ before a figure whose steps are not sure."""
    mark = "" if entry["sure"] else "~"
    (step_a, step_b), (gain_a, gain_b) = entry["pipelined_ms"], entry["speedup_pct"]
    lo, hi = entry["interval_pct"]
    gpu_a, gpu_b = entry["gpu_ms"]  # the forecast keeps A's; B shows what pipelining did to it
    return [
        ("pipelined step ms", f"{mark}{step_a:.3f}", f"{mark}{step_b:.3f}",
         f"{100 * (step_b / step_a - 1):+.1f}%"),
        ("speedup a step", f"{mark}{gain_a:+.1f}% [{lo:.1f}, {hi:.1f}]", f"{mark}{gain_b:+.1f}%",
         f"{gain_b - gain_a:+.1f} pts"),
        ("GPU work a step ms", f"{mark}{gpu_a:.3f}", f"{mark}{gpu_b:.3f}",
         f"{100 * (gpu_b / gpu_a - 1):+.1f}%"),
    ]  # fmt: skip


def unprofiled_words(checked: dict) -> str | None:
    """What the engine without nsys gained, where the traces' index.json or their sweep's results
    say (checked_forecast's unprofiled_ms): the figure the profiled check above it overstates."""
    if "unprofiled_ms" not in checked:
        return None
    block, pipe = checked["unprofiled_ms"]
    return (
        f"Without nsys (the same sweep's unprofiled repeats of the configuration) the "
        f"steady step went {block:.3f} → {pipe:.3f} ms, {checked['unprofiled_pct']:+.1f}% a step: "
        "the engine's own gain, which both traces overstate"
    )


def percent_change(value: float | None) -> str:
    """B − A as a percentage of A, signed, one decimal; '–' where A is zero or not measured."""
    return "–" if value is None or pd.isna(value) else f"{value:+.1f}%"


def _summary(source: Source) -> pd.DataFrame:
    """step_summary's steady-state medians, one row per configuration and depth."""
    summary = step_summary(source.results.runs, source.results.steps)
    if summary.empty:
        return summary
    summary["depth"] = summary["depth"].fillna(0).astype(int)
    first = summary.groupby(["config", "depth"], sort=False).first()
    numbers = summary.groupby(["config", "depth"], sort=False)[list(METRICS)].median()
    out = first.drop(columns=list(METRICS)).join(numbers).reset_index()
    return out


def _pairs(a: pd.DataFrame, b: pd.DataFrame) -> list[tuple[str, dict, dict]]:
    ra, rb = a.to_dict("records"), b.to_dict("records")
    keys = {(r["config"], r["depth"]): r for r in rb}
    matched = [(x["label"], x, keys[(x["config"], x["depth"])]) for x in ra if keys.get(
        (x["config"], x["depth"])
    )]  # fmt: skip
    if matched:
        return matched
    return [(f"{x['label']} | {y['label']}", x, y) for x, y in zip(ra, rb, strict=False)]


def _foreseen(a: Source, b: Source, pairs: list[tuple[str, dict, dict]]) -> list[dict]:
    """Each pair of a blocking nsys trace of our engine (A) and a pipelined one of the same
    configuration (B): runs.analysis.checked_forecast. Another engine's B is not known to be A
    pipelined, and a run directory's unprofiled runs are not inflated as A's are: nothing is said
    of either."""
    out = []
    for pair, ra, rb in pairs:
        if (ra["depth"], rb["depth"]) != (1, 2) or ra["config"] != rb["config"]:
            continue
        path, other = _trace_path(a, ra["run_id"]), _trace_path(b, rb["run_id"])
        if path is not None and other is not None:
            if (checked := checked_forecast(path, other)) is not None:
                out.append({"pair": pair, **checked})
    return out


def _trace_path(source: Source, run_id: str) -> str | None:
    """The nsys trace a source of one trace holds the run from, or None (a run directory)."""
    if "traces" not in source.results.provenance:
        return None
    runs = source.results.runs
    if "trace_path" not in runs:
        return None
    paths = [p for p in runs.loc[runs["run_id"] == run_id, "trace_path"] if isinstance(p, str)]
    return paths[0] if paths else None


def _by_phase(attribution: pd.DataFrame, run: dict) -> dict[str, float]:
    rows = attribution[
        (attribution["config"] == run["config"]) & (attribution["depth"] == run["depth"])
    ]
    return rows.groupby("phase", sort=False)["time_ms"].sum().to_dict()


def _kernels(source: Source, run: dict) -> pd.Series:
    """GPU ms per step by kernel name, over the run's every traced step."""
    assert source.catalog is not None
    run_id = run["run_id"]
    table = kernel_summary(source.catalog, run_id)
    steps = max(1, int((source.results.steps["run_id"] == run_id).sum()))
    return table.groupby("name")["total_ms"].sum() / steps


def _side_by_side(rows: list[tuple], what: str) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=["pair", what, "a", "b"])
    frame[["a", "b"]] = frame[["a", "b"]].astype(float)
    frame["diff"] = frame["b"] - frame["a"]
    return frame
