"""`bubblelab analyze --kernels`: a run's kernel-level view (profiling.kernels) as tables."""

from __future__ import annotations

from rich.table import Table

from .output import cell
from .tables import fixed, percent


def kernel_tables(run: dict) -> list[Table]:
    """Top kernels, GPU time by step kind and class, the whole-run split, the CUDA API summary and
    launch latency of one run (a `run` of runs.analysis.analyze_traces(kernels=True)); --json adds
    every step's latency. The top kernels' caption says when the kernels inside CUDA graphs were
    not traced."""
    view = run["kernels"]
    return [
        _table(
            f"{run['name']}: top kernels by GPU time",
            ("kernel", "calls", "total ms", "mean us", "p50 us", "p90 us", "p99 us", "busy%"),
            [
                (
                    r["kernel"],
                    r["calls"],
                    fixed(r["total_ms"]),
                    fixed(r["mean_us"]),
                    fixed(r["p50_us"]),
                    fixed(r["p90_us"]),
                    fixed(r["p99_us"]),
                    percent(r["busy_share"]),
                )
                for r in view["top_kernels"]
            ],
            caption=view.get("note"),
        ),  # fmt: skip
        _table(
            f"{run['name']}: GPU time by step kind and class of work",
            ("step kind", "class", "ops", "total ms", "ms / step", "share%"),
            [
                (
                    r["kind"],
                    r["class"],
                    r["ops"],
                    fixed(r["total_ms"]),
                    fixed(r["per_step_ms"]),
                    percent(r["share"]),
                )
                for r in view["kernel_classes"]
            ],
        ),  # fmt: skip
        _table(
            f"{run['name']}: the whole capture",
            ("part", "ms", "share%"),
            [(r["part"], fixed(r["ms"]), percent(r["share"])) for r in view["run_split"]],
        ),
        _table(
            f"{run['name']}: CUDA API calls",
            ("call", "calls", "total ms", "mean us", "p50 us", "p99 us", "share%"),
            [
                (
                    r["name"],
                    r["calls"],
                    fixed(r["total_ms"]),
                    fixed(r["mean_us"]),
                    fixed(r["p50_us"]),
                    fixed(r["p99_us"]),
                    percent(r["share"]),
                )
                for r in view["cuda_api"]
            ],
        ),  # fmt: skip
        _table(
            f"{run['name']}: launch latency, API call to kernel start (--json: per step)",
            ("launches by", "launches", "median us", "p90 us", "max us"),
            [
                (
                    r["api"] or "all",
                    r["launches"],
                    fixed(r["median_us"]),
                    fixed(r["p90_us"]),
                    fixed(r["max_us"]),
                )
                for r in view["launch_latency"]
                if r["scope"] != "step"
            ],
        ),  # fmt: skip
    ]


def _table(
    title: str, columns: tuple[str, ...], rows: list[tuple], caption: str | None = None
) -> Table:
    table = Table(title=title, title_justify="left", header_style="bold", caption=caption)
    table.add_column(columns[0], overflow="fold", min_width=20)  # long names break, never cut
    for column in columns[1:]:
        table.add_column(column, justify="right", no_wrap=True)
    for row in rows:
        table.add_row(cell(row[0], limit=40), *(str(v) for v in row[1:]))
    return table
