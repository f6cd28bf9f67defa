"""Per-request latency the way serving benchmarks report it, from the engine's host timestamps.

TTFT: queued -> first token committed. TPOT: (last - first token) / (tokens - 1), per request with
two or more tokens. ITL: every gap between consecutive tokens of a request, pooled. E2E: queued ->
last token. A token counts when its commit makes it visible to the caller (when a streaming server
would send it).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ..core.sequence import Sequence

STATS = ("mean", "median", "p99")


def request_latency(seq: Sequence) -> dict[str, float | None]:
    """ttft_ms, tpot_ms (None below two tokens) and e2e_ms of one finished request."""
    t = seq.token_ns
    if not t:
        return {"ttft_ms": None, "tpot_ms": None, "e2e_ms": None}
    return {
        "ttft_ms": (t[0] - seq.arrival_ns) / 1e6,
        "tpot_ms": (t[-1] - t[0]) / 1e6 / (len(t) - 1) if len(t) > 1 else None,
        "e2e_ms": (t[-1] - seq.arrival_ns) / 1e6,
    }


def latency_summary(seqs: Iterable[Sequence]) -> dict[str, dict[str, float | None]]:
    """{ttft_ms, tpot_ms, itl_ms, e2e_ms} -> {mean, median, p99} over requests (ITL: over gaps)."""
    seqs = list(seqs)
    per_request = [request_latency(s) for s in seqs]
    itl = [np.diff(s.token_ns) / 1e6 for s in seqs if len(s.token_ns) > 1]
    samples = {
        key: np.array([r[key] for r in per_request if r[key] is not None], dtype=float)
        for key in ("ttft_ms", "tpot_ms", "e2e_ms")
    }
    samples["itl_ms"] = np.concatenate(itl) if itl else np.array([])
    return {key: _stats(samples[key]) for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")}


def _stats(x: np.ndarray) -> dict[str, float | None]:
    if not len(x):
        return dict.fromkeys(STATS)
    return {
        "mean": float(x.mean()),
        "median": float(np.median(x)),
        "p99": float(np.percentile(x, 99)),
    }
