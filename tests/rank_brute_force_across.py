"""The cross-rank tables of a tensor-parallel trace (tp_straggler, tp_skew, tp_per_rank and the
steady steps every rank recorded), computed by brute force in plain Python from each rank's table
(tests/rank_brute_force.py: step -> row, times in integer ns), from the definitions the SQL states.
"""

from __future__ import annotations

import statistics
from collections import Counter

from tests import fixture_figures as ff
from tests.rank_brute_force import Table


def gpu_end(row: dict) -> int | None:
    ends = [x for x in (row["forward_end"], row["sampling_end"]) if x is not None]
    return max(ends) if ends else None


def last(ends: dict[int, int | None]) -> dict:
    """Of the ranks' ends of one step: the latest rank (ties: the lower), how much later than rank
    0 and than the next-to-last rank (ns; None where undefined)."""
    known = {r: e for r, e in ends.items() if e is not None}
    if not known:
        return dict(rank=None, extra=None, margin=None)
    order = sorted(known, key=lambda r: (-known[r], r))
    top = known[order[0]]
    return dict(
        rank=order[0],
        extra=top - known[0] if 0 in known else None,
        margin=top - known[order[1]] if len(order) > 1 else None,
    )


def stragglers(tables: list[Table], steps: list[int]) -> dict[int, dict]:
    """tp_straggler.sql per step: the GPU straggler (the end of sampling or forward) and the host
    straggler (the end of `launch`)."""
    out = {}
    for step in steps:
        rows = {r: t[step] for r, t in enumerate(tables) if step in t}
        gpu = last({r: gpu_end(row) for r, row in rows.items()})
        host = last({r: row["launch_end"] for r, row in rows.items()})
        out[step] = dict(
            ranks=sum(gpu_end(row) is not None for row in rows.values()),
            gpu_straggler=gpu["rank"], gpu_extra_ns=gpu["extra"], gpu_margin_ns=gpu["margin"],
            host_straggler=host["rank"], host_extra_ns=host["extra"],
            host_margin_ns=host["margin"],
        )  # fmt: skip
    return out


SKEWED = (
    "forward_start", "forward_end", "sampling_end", "launch_start", "launch_end",
    "finalize_start", "finalize_end",
)  # fmt: skip


def skews(tables: list[Table], steps: list[int]) -> dict[int, dict]:
    """tp_skew.sql per step: latest rank minus earliest of each time (ns; None where no rank has
    it)."""
    out: dict[int, dict] = {}
    for step in steps:
        rows = [t[step] for t in tables if step in t]
        out[step] = {"ranks": len(rows)}
        for c in SKEWED:
            known = [row[c] for row in rows if row[c] is not None]
            out[step][f"{c}_skew_ns"] = max(known) - min(known) if known else None
    return out


def steady(tables: list[Table], warmup: int) -> list[int]:
    """Rank 0's steady steps (core/steady.py's rules, read from its docstring) that every rank
    recorded: decode steps followed by a decode step, with a period, of the modal decode batch
    size (a known one before unknown; ties: the larger), of unknown size only with at least half
    the median decode step's GPU busy time; minus the first `warmup` of them."""
    lead = [tables[0][k] for k in sorted(tables[0])]
    decode = [r for r in lead if r["kind"] == "decode"]
    counts = Counter(r["batch_size"] for r in decode)
    top = max(counts.values())
    sizes = [s for s, n in counts.items() if n == top and s is not None]
    modal = max(sizes) if sizes else None
    typical = statistics.median(r["busy_ns"] for r in decode if r["busy_ns"] is not None)
    chosen = [
        r["step"]
        for r, nxt in zip(lead, lead[1:], strict=False)
        if r["kind"] == nxt["kind"] == "decode"
        and r["period_ns"] is not None
        and r["batch_size"] == modal
        and (r["batch_size"] is not None or r["busy_ns"] * 2 >= typical)
    ][warmup:]
    return [s for s in chosen if all(s in t for t in tables)]


MEDIANS = (
    "forward", "sampling", "bubble", "period", "busy", "compute", "comm", "comm_exposed", "launch",
    "finalize", "handoff", "recv",
)  # fmt: skip


def per_rank(tables: list[Table], steps: list[int]) -> list[dict]:
    """tp_per_rank.sql over `steps`: per rank, the median of each per-step time (ms), its lag behind
    rank 0's forward and launch start (median, ms), and how often it was the straggler."""
    late = stragglers(tables, steps)
    out = []
    for rank, table in enumerate(tables):
        rows = [table[s] for s in steps if s in table]
        row: dict = {"rank": rank, "steps": len(rows)}
        for c in MEDIANS:
            row[f"{c}_ms"] = median_ms(r[f"{c}_ns"] for r in rows)
        for c, start in (("forward", "forward_start"), ("launch", "launch_start")):
            lead = tables[0]
            row[f"{c}_lag_ms"] = median_ms(
                r[start] - lead[r["step"]][start]
                if r[start] is not None and r["step"] in lead and lead[r["step"]][start] is not None
                else None
                for r in rows
            )
        for c in ("gpu", "host"):
            hits = [late[r["step"]][f"{c}_straggler"] for r in rows]
            known = [h == rank for h in hits if h is not None]
            row[f"{c}_straggler_share"] = sum(known) / len(known) if known else None
        out.append(row)
    return out


def median_ms(values) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) / 1e6 if known else None


def stats_ms(values: list[int | None]) -> dict:
    """summary()'s median, p90 (linear interpolation) and max of a per-step column, in ms."""
    known = [v / 1e6 for v in values if v is not None]
    if not known:
        return {"median": None, "p90": None, "max": None}
    return {"median": statistics.median(known), "p90": ff.quantile(known, 0.9), "max": max(known)}
