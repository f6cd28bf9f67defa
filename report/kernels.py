"""The report's "Kernels" section: per run with a catalog, its top kernels, each step kind's GPU
time by class of work and the whole capture's split into compute, copies and idle time
(profiling.kernels)."""

from __future__ import annotations

from ..profiling.kernels import kernel_view
from ..runs.sources import Source
from .labels import run_name

TOP = 8  # kernels listed per run; the rest are one row
CLASSES = ("gemm", "attention", "elementwise", "sampling", "collective", "copy", "other")
_ORDER = {c: i for i, c in enumerate(CLASSES)}  # the bars' order; an unknown class goes last


def kernel_sections(sources: list[Source]) -> list[dict]:
    """One entry per run of the sources that have a catalog: name, top (top_kernels records),
    classes (by_kind), split (run_split records, shares adding up to 1)."""
    sections = []
    for source in sources:
        if source.catalog is None:
            continue
        for run in source.results.runs.to_dict("records"):
            if run.get("source") == "timeline":  # in-process: no kernels, and ~70 ms of queries
                continue
            view = kernel_view(source.catalog, run["run_id"], TOP)
            if view["top_kernels"]:  # an in-process timeline has no kernels
                sections.append(
                    {
                        "name": run_name(run),
                        "top": view["top_kernels"],
                        "classes": by_kind(view["kernel_classes"]),
                        "split": view["run_split"],
                    }
                )
    return sections


def by_kind(records: list[dict]) -> list[dict]:
    """kernel_classes records regrouped for a bar per step kind: kind, ms_per_step (None where the
    kind has no steps, e.g. 'outside steps'), total_ms and parts [{class, ms, share of the kind}]
    in CLASSES order."""
    kinds: dict[str, list[dict]] = {}
    for r in records:
        kinds.setdefault(r["kind"], []).append(r)
    out = []
    for kind, rows in kinds.items():
        total = sum(r["total_ms"] for r in rows)
        per_step = [r["per_step_ms"] for r in rows if r["per_step_ms"] is not None]
        rows = sorted(rows, key=lambda r: _ORDER.get(r["class"], len(CLASSES)))
        out.append(
            {
                "kind": kind,
                "ms_per_step": sum(per_step) if per_step else None,
                "total_ms": total,
                "parts": [
                    {
                        "class": r["class"],
                        "ms": r["per_step_ms"] if per_step else r["total_ms"],
                        "share": r["total_ms"] / total if total else 0.0,
                    }
                    for r in rows
                ],
            }
        )
    return out
