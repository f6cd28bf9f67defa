"""`bubblelab analyze`'s tables and lines for the runs it read (a report of
runs.analysis.analyze_traces): the steps found and the doubts about them, the per-step breakdown,
where the bubble went, a split engine's line, and a foreign run's syncs and forecast."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from .output import cell
from .tables import fixed, percent, show


def found_table(runs: list[dict]) -> Table:
    table = Table(title="Steps found", title_justify="left", header_style="bold")
    for column in (
        "run",
        "rule",
        "steps",
        "decode",
        "prefill-like",
        "period CV",
        "GPU covered%",
        "sure",
    ):
        table.add_column(column, justify="left" if column in ("run", "rule", "sure") else "right")
    for run in runs:
        found = run["steps_found"]
        table.add_row(
            cell(run["name"]),
            found["rule"],
            str(found["steps"]),
            str(found["decode_steps"]),
            str(found["prefill_steps"]),
            fixed(found["period_cv"]),
            percent(found["gpu_coverage"]),
            found["confidence"],
        )
    table.caption = Text("\n").join(
        cell(f"{r['name']}: {r['steps_found']['detail']}", limit=200)
        + (
            cell(f"; sure: {r['steps_found']['evidence']}", limit=200)
            if r["steps_found"].get("evidence") and r["steps_found"]["sure"]
            else Text()
        )
        for r in runs
    )
    table.caption_justify = "left"
    return table


def doubts(runs: list[dict]) -> list[Text]:
    """One red line per run whose steps are not sure (its figures are marked ~), and one per kind
    of row the value checks dropped or counted."""
    lines = []
    for run in runs:
        found = run["steps_found"]
        if not found["sure"] and run["steps"]:
            line = cell(f"run {run['name']}: {found['unsure']}; its figures are marked ~", 400)
            line.stylize("red")
            lines.append(line)
        for check in found["checks"]:
            line = cell(f"run {run['name']}: {check}", 300)
            line.stylize("red")
            lines.append(line)
    return lines


def _median(stat: dict) -> str:
    return fixed(stat["median"])


def steps_table(runs: list[dict]) -> Table:
    table = Table(
        title="Steady-state steps, median ms (--json adds p10/p90)",
        title_justify="left",
        header_style="bold",
        caption_justify="left",
    )
    for column in (
        "run",
        "depth",
        "streams",
        "steps",
        "forward",
        "sampling",
        "bubble",
        "kernel gap",
        "period",
        "bubble%",
        "host-late%",
    ):
        table.add_column(column, justify="left" if column == "run" else "right", no_wrap=True)
    for run in runs:
        mark = "" if run["steps_found"]["sure"] else "~"  # not sure of the steps (line above)
        table.add_row(
            cell(run["name"]),
            _dash(run["depth"]),
            _dash(run["streams"]),
            *(
                value if value == "–" else mark + value
                for value in (
                    str(run["steps"]),
                    *(
                        _median(run[f"{c}_ms"])
                        for c in ("forward", "sampling", "bubble", "kernel_gap", "period")
                    ),
                    percent(run["bubble_share"]),
                    percent(run["host_late_share"]),
                )
            ),
        )
    unsure = not all(run["steps_found"]["sure"] for run in runs)
    table.caption = (
        ("~: the steps are not sure (the red line above says why and how to settle it)\n" * unsure)
        + "forward, sampling: GPU spans; bubble: period outside them; kernel gap: idle inside "
        "them\nforeign runs: forward = period - bubble; bubble / kernel gap: idle gaps above / "
        "below --gap-threshold-us\n"
        "host-late%: share of the bubble in gaps that ended only when the host launched work"
    )
    return table


def _dash(value: object) -> str:
    return "–" if value is None else str(value)


def attribution_table(runs: list[dict]) -> Table:
    """Top-level parts down, runs across: the bubble per steady step by what the host was doing
    during it (time, the headline: what you would have to make faster) and by the part of the loop
    the host was in when each idle gap began (began)."""
    splits = (("time", "time"), ("began", "began"))
    parts = list(
        dict.fromkeys(
            p
            for run in runs
            for key, _ in splits
            for p in run["attribution_ms_per_step"][key]["top_level"]
        )
    )
    table = Table(
        title="Bubble ms per steady step (mean), by the part of the loop the host was in",
        title_justify="left",
        header_style="bold",
        caption_justify="left",
    )
    table.add_column("host part", no_wrap=True)
    for run in runs:
        for _, label in splits:
            header = cell(run["name"])
            header.append(f"\n{label}")
            table.add_column(header, justify="right", no_wrap=True)
    for part in parts:
        table.add_row(
            cell(part),
            *(
                fixed(run["attribution_ms_per_step"][key]["top_level"].get(part))
                for run in runs
                for key, _ in splits
            ),
        )
    table.caption = (
        "time: while the host was in it (the headline)\nbegan: gaps that began in it\n"
        "each column adds up to the mean bubble a step (the summary above gives the median)"
    )
    return table


def split_line(split: dict, names: dict[str, str]) -> str:
    """Another engine's trace of several processes, each on its own GPU running collectives."""
    runs = ", ".join(names.get(r, r) for r in split["run_ids"])
    matched = ", ".join(f"{m} of {n}" for m, n in split["matched_steps"])
    return (
        f"{runs}: {len(split['run_ids'])} processes of one trace, each on its own GPU and "
        f"launching collectives: most likely one engine split over {split['gpus']} GPUs, ranked "
        f"by GPU. Each is also a run of its own. Its ranks side by side below: each rank's steps "
        f"matched to rank 0's by the GPU time they share ({matched} steps matched), the GPU "
        "span standing for the forward; host phases unknown (docs/tensor-parallel.md)"
    )


def print_foreign(console: Console, run: dict) -> None:
    """A foreign run's idle split, host syncs per step, what its host did in the bubble, and the
    gain."""
    from ..runs.analysis import bound_words  # DuckDB and the cost model: not for --help

    rid, split = cell(run["name"]).plain, run["idle_split"]
    if split:
        console.print(
            f"run {rid}: idle {split['idle_ms_per_step']:.3f} ms a steady step: "
            f"{percent(split['longest_bubble_share'])}% in its longest bubble, "
            f"{percent(split['other_bubbles_share'])}% in other bubbles, "
            f"{percent(split['kernel_gaps_share'])}% in gaps between kernels",
            markup=False,
        )
    split = run["attribution_ms_per_step"]
    if split["time"]["phase"]:
        table = Table(
            title=Text(f"run {rid}: bubble ms per step by what the host was doing"),
            title_justify="left",
        )
        table.add_column("host activity")
        table.add_column("time", justify="right")
        table.add_column("began", justify="right")
        for phase, ms in list(split["time"]["phase"].items())[:8]:
            table.add_row(cell(phase), fixed(ms), fixed(split["began"]["phase"].get(phase)))
        show(console, table)
    if run["syncs_per_step"]:
        table = Table(title=Text(f"run {rid}: host syncs per steady step"), title_justify="left")
        for column in (
            "per step",
            "event",
            "API",
            "detail",
            "closes step",
            "after kernel",
            "NVTX range",
        ):
            table.add_column(column, justify="right" if column == "per step" else "left")
        for row in run["syncs_per_step"]:
            table.add_row(
                f"{row['per_step']:.3g}",
                cell(row["event"]),
                cell(row["api"]),
                cell(row["detail"]),
                "yes" if row["closing"] else Text("no: extra", style="red"),
                cell(row["after"]),
                cell(row["phase"]),
            )
        show(console, table)
    gain = run.get("pipelining", {})
    if "speedup_pct" in gain:
        lo, hi = gain["interval_pct"]
        mark = bound_words(gain)  # nsys slowed every graph launch: the profiled engine's number
        console.print(
            f"run {rid}: {mark}pipelining would buy {gain['speedup_pct']:+.1f}% "
            f"(95% interval {lo:+.1f}% .. {hi:+.1f}%), assuming:",
            markup=False,
        )
        for line in gain["assumptions"]:
            console.print(Text("  - ") + cell(line, limit=300))
        whole = gain["whole_run"]
        wlo, whi = whole["interval_pct"]
        console.print(
            f"run {rid}: over the whole trace, {mark}pipelining would buy "
            f"{whole['speedup_pct']:+.1f}% (95% interval {wlo:+.1f}% .. {whi:+.1f}%): the figure "
            "to set beside a measured wall clock.",
            markup=False,
        )
        console.print(Text("  - ") + cell(whole["line"], limit=900))
    elif gain:
        console.print(cell(f"run {rid}: no pipelining prediction ({gain['not_predicted']})", 300))
