"""The report's "One engine over several GPUs" section: another engine's trace of several
processes, each on its own GPU running collectives (nano-vllm at tensor parallel 2, say), its ranks
side by side as `bubblelab analyze` prints them (profiling.overview.split_engines)."""

from __future__ import annotations

from ..profiling.overview import split_engines
from ..runs.sources import Source
from .labels import run_name

VALUES = ("forward_ms", "bubble_ms", "period_ms", "compute_ms", "comm_ms", "forward_lag_ms",
          "gpu_straggler_share")  # fmt: skip


def split_sections(sources: list[Source], found: list[dict[str, dict]]) -> list[dict]:
    """One entry per split engine of the sources that have a catalog (`found`: each source's
    report.steps_found.steps_found): rank 0's run name, how many of each rank's steps matched
    rank 0's, whether the ranks' steps are sure (and why, or why not), why no lag, straggler or
    skew is shown where they are not, and a row per rank (VALUES)."""
    sections = []
    for source, mine in zip(sources, found, strict=True):
        if source.catalog is None or len(mine) < 2:
            continue
        names = {r["run_id"]: run_name(r) for r in source.results.runs.to_dict("records")}
        for split in split_engines(source.catalog, mine):
            side = split["ranks"]
            if side is None:
                continue
            sections.append(
                {
                    "config": names.get(split["run_ids"][0], split["run_ids"][0]),
                    "run_ids": [source.page_id(r) for r in split["run_ids"]],
                    "matched": split["matched_steps"],
                    "steps": side["steady_steps"],
                    "sure": split["sure"],
                    "evidence": split["evidence"],
                    "cross_rank_timing": split["cross_rank_timing"],
                    "ranks": [
                        {"rank": r["rank"], **{v: r.get(v) for v in VALUES}}
                        for r in side["per_rank"]
                    ],
                }
            )
    return sections
