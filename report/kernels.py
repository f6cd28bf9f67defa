"""The report's "Kernels" section: per run with a catalog, its top kernels and the whole capture's
split into compute, copies and idle time (profiling.kernels)."""

from __future__ import annotations

from ..profiling.kernels import kernel_view
from ..runs.sources import Source
from .labels import run_name

TOP = 8  # kernels listed per run; the rest are one row


def kernel_sections(sources: list[Source]) -> list[dict]:
    """One entry per run of the sources that have a catalog: name, top (top_kernels records),
    split (run_split records, shares adding up to 1)."""
    sections = []
    for source in sources:
        if source.catalog is None:
            continue
        for run in source.results.runs.to_dict("records"):
            view = kernel_view(source.catalog, run["run_id"], TOP)
            if view["top_kernels"]:  # an in-process timeline has no kernels
                sections.append(
                    {"name": run_name(run), "top": view["top_kernels"], "split": view["run_split"]}
                )
    return sections
