"""The ranks of a tensor-parallel run in `bubblelab analyze`'s output: a table per run with a column
per rank, and under it who finished the steps last and how far apart the ranks were
(profiling.ranks.summary). Phase names come from the trace: they go through output.cell."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from .output import cell
from .tables import fixed

ROWS = (
    ("forward", "forward_ms"),
    ("sampling", "sampling_ms"),
    ("bubble", "bubble_ms"),
    ("period", "period_ms"),
    ("compute", "compute_ms"),
    ("comm", "comm_ms"),
    ("comm exposed", "comm_exposed_ms"),
    ("launch", "launch_ms"),
    ("finalize", "finalize_ms"),
    ("handoff", "handoff_ms"),
    ("recv", "recv_ms"),
    ("forward lag", "forward_lag_ms"),
    ("launch lag", "launch_lag_ms"),
)
SKEWS = (
    ("forward start", "forward_start_skew_ms"),
    ("forward end", "forward_end_skew_ms"),
    ("sampling end", "sampling_end_skew_ms"),
    ("launch start", "launch_start_skew_ms"),
    ("launch end", "launch_end_skew_ms"),
    ("finalize start", "finalize_start_skew_ms"),
    ("finalize end", "finalize_end_skew_ms"),
)


def rank_table(entry: dict, name: str, matched: str = "by step id") -> Table:
    """One tensor-parallel run: a column per rank (any number of them), medians over rank 0's
    steady steps in ms, then how often each rank was last and where its bubble went. matched: how
    the ranks' steps were matched (another engine's: by the GPU time they share)."""
    title = Text("Ranks of ") + cell(name)
    title.append(
        f": {entry['ranks']} ranks, {entry['steady_steps']} steady steps "
        f"(rank 0's, matched {matched}), median ms"
    )
    table = Table(title=title, title_justify="left", header_style="bold", caption_justify="left")
    table.add_column("")
    ranks = entry["per_rank"]
    for row in ranks:
        table.add_column(f"rank {row['rank']}", justify="right", no_wrap=True)
    for label, key in ROWS:
        if any(row[key] is not None for row in ranks):
            table.add_row(label, *(fixed(row[key]) for row in ranks))
    table.add_row("GPU last", *(_pct(row["gpu_straggler_share"]) for row in ranks))
    table.add_row("host last", *(_pct(row["host_straggler_share"]) for row in ranks))
    for split, label in (("time", "bubble in "), ("began", "gaps began in ")):
        by_part = [
            row.get("attribution_ms_per_step", {}).get(split, {}).get("top_level", {})
            for row in ranks
        ]
        for part in dict.fromkeys(p for parts in by_part for p in parts):
            cells = [fixed(parts.get(part)) for parts in by_part]
            table.add_row(Text(label) + cell(part, 40), *cells)
    return table


def rank_lines(entry: dict) -> list[str]:
    """The straggler and the skew of a tensor-parallel run, in words (printed under its table)."""
    late, spread = entry["straggler"], entry["skew"]
    return [
        f"  GPU straggler: {fixed(late['gpu_extra_ms']['median'])} ms after rank 0's GPU "
        f"(median; p90 {fixed(late['gpu_extra_ms']['p90'])}); host straggler: "
        f"{fixed(late['host_extra_ms']['median'])} ms after rank 0's host",
        "  skew between ranks, median ms: "
        + ", ".join(f"{label} {fixed(spread[key]['median'])}" for label, key in SKEWS),
    ]


LEGEND = (
    "GPU last: share of steps whose GPU work the rank finished last (the straggler); host last: "
    "whose forward its host enqueued last. lag: the rank's start of a step after rank 0's (forward "
    "on its GPU, launch on its host). comm: collective (NCCL) kernels, a row only where kernels "
    "were recorded (an in-process timeline records spans). bubble in: the host part the rank was "
    "in while its GPU sat idle, ms per step (a worker's `recv`: waiting for rank 0); gaps began "
    "in: the same bubble by the part the rank was in when each idle gap began."
)


def _pct(share: float | None) -> str:
    return "–" if share is None else f"{100 * share:.0f}%"
