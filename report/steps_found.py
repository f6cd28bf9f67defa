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


def found_sections(sources: list[Source]) -> list[dict]:
    """One entry per foreign run of the sources that have a catalog (our own runs' steps are the
    engine's own ranges: nothing to find): its name and step_summary's KEYS."""
    out = []
    for source in sources:
        con = source.catalog
        if con is None:
            continue
        for run in source.results.runs.to_dict("records"):
            run_id = run["run_id"]
            if not is_foreign(con, run_id):
                continue
            steps = per_step(con, run_id)
            found = step_summary(con, run_id, steps, steady_state(steps), None)
            out.append({"name": run_name(run), "run_id": run_id, **{k: found[k] for k in KEYS}})
    return out
