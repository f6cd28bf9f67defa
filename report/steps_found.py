"""The report's "How the steps were found" card: for another engine's runs, each one's step rule,
the evidence for it and how sure it is (profiling.evidence.step_summary, what `bubblelab analyze`
prints first), so that no figure of a run whose steps are not sure is read as sure."""

from __future__ import annotations

from ..core.steady import steady_state
from ..profiling.analysis import per_step
from ..profiling.evidence import step_summary
from ..profiling.foreign import is_foreign
from ..runs.sources import Source
from .labels import run_name

KEYS = ("rule", "detail", "steps", "decode_steps", "prefill_steps", "period_cv", "gpu_coverage",
        "confidence", "sure", "evidence", "unsure")  # fmt: skip


def steps_found(source: Source) -> dict[str, dict]:
    """run_id -> step_summary of each foreign run of a source with a catalog (our own runs' steps
    are the engine's own ranges: nothing to find); made once for this card and the split section
    (report.split), which both stand on it."""
    con = source.catalog
    if con is None:
        return {}
    found = {}
    for run_id in source.results.runs["run_id"]:
        if is_foreign(con, run_id):
            steps = per_step(con, run_id)
            found[run_id] = step_summary(con, run_id, steps, steady_state(steps), None)
    return found


def found_sections(sources: list[Source], found: list[dict[str, dict]]) -> list[dict]:
    """One entry per foreign run (`found`: steps_found of each source): its name, run_id and
    step_summary's KEYS."""
    return [
        {
            "name": run_name(run),
            "run_id": source.page_id(run["run_id"]),
            **{k: mine[run["run_id"]][k] for k in KEYS},
        }
        for source, mine in zip(sources, found, strict=True)
        for run in source.results.runs.to_dict("records")
        if run["run_id"] in mine
    ]
