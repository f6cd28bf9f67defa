"""`bubblelab analyze --kernels`: a run's kernel-level view (profiling.kernels) as tables."""

from __future__ import annotations

from rich.table import Table

from .output import cell


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
                    _f(r["total_ms"]),
                    _f(r["mean_us"]),
                    _f(r["p50_us"]),
                    _f(r["p90_us"]),
                    _f(r["p99_us"]),
                    _pct(r["busy_share"]),
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
                    _f(r["total_ms"]),
                    _f(r["per_step_ms"]),
                    _pct(r["share"]),
                )
                for r in view["kernel_classes"]
            ],
        ),  # fmt: skip
        _table(
            f"{run['name']}: the whole capture",
            ("part", "ms", "share%"),
            [(r["part"], _f(r["ms"]), _pct(r["share"])) for r in view["run_split"]],
        ),
        _table(
            f"{run['name']}: CUDA API calls",
            ("call", "calls", "total ms", "mean us", "p50 us", "p99 us", "share%"),
            [
                (
                    r["name"],
                    r["calls"],
                    _f(r["total_ms"]),
                    _f(r["mean_us"]),
                    _f(r["p50_us"]),
                    _f(r["p99_us"]),
                    _pct(r["share"]),
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
                    _f(r["median_us"]),
                    _f(r["p90_us"]),
                    _f(r["max_us"]),
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
    for i, column in enumerate(columns):
        table.add_column(column, justify="left" if i == 0 else "right", no_wrap=True)
    for row in rows:
        table.add_row(cell(row[0], limit=40), *(str(v) for v in row[1:]))
    return table


def _f(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def _pct(share: float | None) -> str:
    return "–" if share is None else f"{100 * share:.1f}"
