"""The page's forecast for a trace of another engine, or of our own engine's blocking loop: what
pipelining would buy each of its runs, from the trace alone. These are `bubblelab analyze TRACE`'s
figures (runs.analysis.trace_forecasts; ours: `--domain none`'s, runs.analysis.blocking_forecast),
so the page and the terminal cannot disagree; they stand where a sweep's page has its forecast from
depth 1, since no configuration of such a trace was measured at both depths."""

from __future__ import annotations

from ..costmodel.configs import known_int
from ..runs.analysis import blocking_forecast, bound_words, checked_forecast, trace_forecasts
from ..runs.sources import Source
from .diff import unprofiled_words, z_words
from .labels import run_name


def forecast_sections(
    sources: list[Source], found: list[dict[str, dict]], shown: set[str]
) -> list[dict]:
    """One entry per foreign run the page shows (`found`: report.steps_found of each source;
    `shown`: the page's run ids, Source.page_id's, an engine split over GPUs by its rank 0), and
    for the blocking run of our own engine a trace alone holds: its name, the gain and its
    interval, how far it holds (`bound`), the assumptions, the whole-trace figure; or
    `not_predicted` and why; `sure`: whether its steps are; `ours`: our engine's run; `checked`:
    runs.analysis.checked_forecast against a pipelined trace of ours on the page, of the same
    configuration (its name: `against`)."""
    pipelined = _pipelined(sources, shown)
    out = []
    for source, mine in zip(sources, found, strict=True):
        ids = [run_id for run_id in mine if source.page_id(run_id) in shown]
        if source.catalog is None or not (ids or "traces" in source.results.provenance):
            continue
        gains = {  # run_id -> (gain, its steps sure, ours); not sure: the figure carries a ~
            k: (v, bool(mine[k]["sure"]), False)
            for k, v in trace_forecasts(source.catalog, ids).items()
        }
        gains.update(_blocking(source, mine, shown))
        for run in source.results.runs.to_dict("records"):
            if (gain := gains.get(run["run_id"])) is not None:
                out.append({"name": run_name(run), "run_id": source.page_id(run["run_id"]),
                            "sure": gain[1], "ours": gain[2], **_entry(gain[0])})  # fmt: skip
                other = pipelined.get(run_name(run, depth=False)) if gain[2] else None
                if other is not None and (
                    checked := checked_forecast(run["trace_path"], other[1], gain[:2])
                ):
                    out[-1] |= {"checked": checked, "against": other[0],
                                "unprofiled": unprofiled_words(checked),
                                "z_words": z_words(checked, "this trace")}  # fmt: skip
    return out


def _pipelined(sources: list[Source], shown: set[str]) -> dict[str, tuple[str, str]]:
    """configuration -> (name, trace path) of each nsys trace of our engine at depth 2 the page
    shows, one trace a source (a sweep's run directory is checked by predict, not here)."""
    out = {}
    for source in sources:
        runs = source.results.runs
        if "traces" not in source.results.provenance or len(runs) != 1:
            continue
        run = runs.iloc[0]
        if known_int(run["depth"]) == 2 and source.page_id(run["run_id"]) in shown:
            if isinstance(run.get("trace_path"), str):
                out[run_name(run, depth=False)] = (run_name(run), run["trace_path"])
    return out


def _blocking(source: Source, mine: dict[str, dict], shown: set[str]) -> dict[str, tuple]:
    """A trace of our own engine's blocking loop, alone on the page: its forecast from the trace
    read as any engine's (runs.analysis.blocking_forecast), as `bubblelab analyze TRACE --domain
    none` prints it. A sweep's depth-1 runs are forecast by predict instead."""
    if "traces" not in source.results.provenance:
        return {}
    runs = source.results.runs
    ours = runs[~runs["run_id"].isin(list(mine)) & runs["run_id"].map(source.page_id).isin(shown)]
    if len(ours) != 1 or known_int(ours["depth"].iloc[0]) != 1:
        return {}
    run = ours.iloc[0]
    found = blocking_forecast(run["trace_path"]) if run["trace_path"] else None
    return {} if found is None else {run["run_id"]: (*found, True)}


def _entry(gain: dict) -> dict:
    if "speedup_pct" not in gain:
        return {"not_predicted": gain.get("not_predicted", "no figure")}
    whole = gain["whole_run"]
    return {
        "speedup": gain["speedup_pct"],
        "interval": tuple(gain["interval_pct"]),
        "bound": bound_words(gain).rstrip(": "),
        "assumptions": list(gain["assumptions"]),
        "whole": {
            "speedup": whole["speedup_pct"],
            "interval": tuple(whole["interval_pct"]),
            "line": whole["line"],
        },
    }
