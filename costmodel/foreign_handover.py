"""The GPU's hand-over between queued launches, priced from a blocking trace.

Pipelining hides the host's lateness, not the GPU's own idle between two launches queued back to
back. At depth 2 every launch the blocking loop was late for is queued behind the work before it,
and the GPU still idles between them: on bubblelab's engine (H200, under nsys) ~4 us before a
graph replay and ~9 us before a copy, 0.012-0.018 ms a step unprofiled. A blocking trace shows
what such a queued launch costs wherever the host happened to launch ahead within a step
(profiling.foreign.launch_handovers: the gaps between two launches, `queued` where the second was
launched before the GPU went idle). So each late launch (a bubble gap the host ended) is priced at
the median idle of the trace's queued launches between the same kinds of op (graph, kernel,
memcpy, memset), else of those before the same kind, else of all; never more than its own gap.
The bubble gaps whose work was already queued are the GPU's own and stay as they are.

On our own traces read as foreign (qwen3-0.6b, H200, 1 and 32 streams), the GPU's work a step so
priced is the measured depth-2 period within 0.3%, where the GPU's work alone is 1.3-1.6% short;
on a torch.compile engine's trace its queued copies cost 1.5 us each, not a graph's 4-9
(docs/foreign-traces.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

MIN_SAMPLES = 3  # queued launches a price is taken from; fewer: the next, broader price


@dataclass(frozen=True)
class Handover:
    prices_ms: dict[str, float]  # "kind_before>kind_after", "*>kind_after", "*>*": median idle
    samples: int  # the queued launch gaps priced from
    per_step: pd.Series  # by step: its bubble as the GPU's own at depth 2 (late launches priced)

    @property
    def ms(self) -> float:
        """The price of a queued launch of any kind (the median over all samples)."""
        return self.prices_ms["*>*"]

    def added_ms(self, steps: pd.DataFrame) -> pd.Series:
        """What each of `steps` adds to its GPU work (period - bubble) once pipelined, aligned to
        `steps`' index (0 where its step has no bubble gap)."""
        added = steps["step"].map(self.per_step).fillna(0.0).astype(float)
        return added.set_axis(steps.index)

    def line(self, steady: pd.DataFrame) -> str:
        after = {k[2:]: v for k, v in self.prices_ms.items() if k.startswith("*>") and k != "*>*"}
        kinds = ", ".join(f"{v * 1e3:.1f} us before a {k}" for k, v in sorted(after.items()))
        kinds = kinds or f"{self.ms * 1e3:.1f} us"
        return (
            f"Hand-over: +{float(self.added_ms(steady).median()):.4f} ms of GPU work a steady "
            "step: each launch the host was late for, queued at depth 2, idles the GPU as the "
            f"trace's {self.samples} queued launches of its kinds do ({kinds}), at most its gap; "
            "bubble already queued stays."
        )


def handover(launches: pd.DataFrame | None, steady_steps: pd.Series) -> Handover | None:
    """The hand-over from a foreign run's launch gaps (profiling.foreign.launch_handovers), priced
    from the queued launches of the steady steps (of every step where those are fewer than
    MIN_SAMPLES); None where the trace shows no queued launch, or no gaps were given."""
    if launches is None or launches.empty:
        return None
    queued = launches[launches["queued"].eq(True) & launches["between_launches"]]
    sample = queued[queued["step"].isin(steady_steps)]
    if len(sample) < MIN_SAMPLES:
        sample = queued
    if sample.empty:
        return None
    prices = _prices(sample)
    bubble = launches[launches["bubble"]]
    late = ~bubble["queued"].eq(True)
    keys = zip(bubble["kind_before"].map(_name), bubble["kind_after"].map(_name), strict=True)
    price = [_price(prices, f"{before}>{after}") for before, after in keys]
    cost = np.where(late, np.minimum(bubble["idle_us"].to_numpy(float), price), bubble["idle_us"])
    per_step = pd.Series(cost / 1e3, index=bubble.index).groupby(bubble["step"]).sum()
    return Handover(prices_ms={k: v / 1e3 for k, v in prices.items()}, samples=len(sample),
                    per_step=per_step)  # fmt: skip


def _prices(sample: pd.DataFrame) -> dict[str, float]:
    """Median idle (us) of the queued launches by kinds on both sides, by the kind after, and of
    all, each where it has MIN_SAMPLES (all: always)."""
    prices = {"*>*": float(sample["idle_us"].median())}
    for keys in (["kind_after"], ["kind_before", "kind_after"]):
        groups = sample.groupby(keys, dropna=False, observed=True)["idle_us"]
        for kinds, row in groups.agg(["size", "median"]).iterrows():
            before, after = kinds if len(keys) == 2 else ("*", kinds)
            if row["size"] >= MIN_SAMPLES:
                prices[f"{_name(before)}>{_name(after)}"] = float(row["median"])
    return prices


def _name(kind: object) -> str:
    """A kind of op as a price's key names it ('?': none; the query gives a category)."""
    return "?" if pd.isna(kind) else str(kind)


def _price(prices: dict[str, float], key: str) -> float:
    """The most specific price for a launch between these kinds."""
    after = "*>" + key.split(">", 1)[1]
    return prices.get(key, prices.get(after, prices["*>*"]))


NOT_SEEN = (
    "The GPU's hand-over between two queued launches (~4-9 us each on bubblelab's engine, H200) "
    "is not in this trace (no launch whose work was already queued) and is left out: the figure "
    "is high by about its share."
)
