"""The page's forecast for a trace of another engine: what pipelining would buy each of its runs,
from the trace alone. These are `bubblelab analyze TRACE`'s figures (runs.analysis.trace_forecasts),
so the page and the terminal cannot disagree; they stand where a sweep's page has its forecast from
depth 1, since no configuration of such a trace was measured at both depths."""

from __future__ import annotations

from ..runs.analysis import bound_words, trace_forecasts
from ..runs.sources import Source
from .labels import run_name


def forecast_sections(
    sources: list[Source], found: list[dict[str, dict]], shown: set[str]
) -> list[dict]:
    """One entry per foreign run the page shows (`found`: report.steps_found of each source;
    `shown`: the page's run ids, an engine split over GPUs by its rank 0): its name, the gain and
    its interval, how far it holds (`bound`), the assumptions, the whole-trace figure; or
    `not_predicted` and why; `sure`: whether the steps it stands on are."""
    out = []
    for source, mine in zip(sources, found, strict=True):
        ids = [run_id for run_id in mine if run_id in shown]
        if source.catalog is None or not ids:
            continue
        gains = trace_forecasts(source.catalog, ids)
        for run in source.results.runs.to_dict("records"):
            if (gain := gains.get(run["run_id"])) is not None:
                sure = bool(mine[run["run_id"]]["sure"])  # else its figure carries the doubt: ~
                out.append({"name": run_name(run), "run_id": run["run_id"], "sure": sure,
                            **_entry(gain)})  # fmt: skip
    return out


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
