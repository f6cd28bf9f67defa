"""The zombie tax of a foreign engine's forecast, z = 1/L, where a trace rarely says what L is.

A trace holds steps, not requests. Given the mean generated length (--output-len-mean) the post's
z = 1/L holds as it is. Without it, a trace whose requests all joined before its first decode step
(one batch from start to end) shows the longest request's length, its decode steps + 1. A trace
whose requests join mid-run (prefill-like steps among the decode steps: a closed loop, continuous
batching, or a trace cut from a longer run) shows no request's length: its decode steps + 1 is only
as long as the capture was. There the headline keeps that guess and says so, and the interval's low
end takes the tax at the cadence the trace does show, decode steps per admission: exactly 1/L where
requests come one at a time (one stream) or in batches that finish together, and above the tax where
admissions overlap or the capture cuts a request short (S streams admitting one request each see L/S
steps between admissions, while a zombie row costs S rows' marginal share of a step,
z = S * dg / (L * g), at most S/L). Measured on the committed H200 traces of our engine (qwen3-0.6b,
L = 117 and 111 tokens): 1 stream cut to 150 steps, 75 steps per admission; 32 streams, 4.4.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pandas as pd


@dataclass(frozen=True)
class ZombieTax:
    z: float  # the headline's
    z_max: float  # the interval's low end
    L: float  # the length z = 1/L takes (given, else the decode steps + 1)
    source: str  # "given", "one batch", "trace length (a guess)" or "none" (no zombies)
    line: str  # the assumption, in a sentence for the reader


def admissions(steps: pd.DataFrame) -> tuple[int, bool]:
    """(segments, mid_run): how many stretches of decode steps the trace's admissions cut it into
    (each run of prefill-like steps starts one, and steps before the first make one more), and
    whether any admission came after a decode step."""
    kinds = "".join("p" if k == "prefill" else "d" for k in steps.sort_values("step")["kind"])
    runs = re.findall(r"p+", kinds)
    lead = kinds.startswith("d")
    return len(runs) + int(lead), bool(re.search(r"dp", kinds))


def zombie_tax(
    steps: pd.DataFrame, output_len: float | None, zombies: bool, known_from: str = "given"
) -> ZombieTax:
    """The tax the forecast charges a foreign run (module docstring), from its per-step table;
    known_from: where output_len came from, in the words of its line."""
    decode = int((steps["kind"] == "decode").sum())
    L = float(output_len) if output_len else decode + 1.0
    if not zombies:
        line = (
            "z = 0: no zombies (given): every request stops at a length its engine knows when it "
            "launches a step, and it launches none past it."
        )
        return ZombieTax(0.0, 0.0, L, "none", line)
    if output_len:
        line = f"z = 1/L = {1 / L:.4f} with L = {L:g} tokens a request ({known_from})."
        return ZombieTax(1 / L, 1 / L, L, "given", line)
    segments, mid_run = admissions(steps)
    if not mid_run:
        line = (
            f"z = 1/L = {1 / L:.4f} with L = {L:g} tokens a request (the run's decode steps + 1: "
            "one batch from start to end)."
        )
        return ZombieTax(1 / L, 1 / L, L, "one batch", line)
    cadence = max(1.0, decode / segments)
    line = (
        f"z = 1/L = {1 / L:.4f} with L = {L:g}, the trace's decode steps + 1, a guess: requests "
        f"joined mid-run ({segments} stretches of decode steps between admissions), so no request "
        f"need be that long. The interval's low end takes z = {1 / cadence:.4f}, one zombie per "
        f"{cadence:.3g} decode steps, the admissions' cadence: the tax where requests come one at "
        "a time or in batches that finish together, above it where they overlap or the capture "
        "cuts one short. Give "
        "--output-len-mean, or --no-zombies where requests stop at caps the engine knows."
    )
    return ZombieTax(1 / L, 1 / cadence, L, "trace length (a guess)", line)
