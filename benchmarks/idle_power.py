"""What does a GPU draw in the gaps between its kernels? (costmodel/power.py's `IDLE_W`.)

A depth-1 step keeps the GPU busy for part of its period and idle through the bubble. The power
the driver samples over a run is then about idle + busy share x (kept-busy draw - idle), at the
clock the run held; the power caveat projects the kept-busy draw from depth 1 and needs the idle
term for it. This measures it apart from any engine: kernels in a fixed cycle (a busy chunk, then
the host spins until the cycle's end, as a bubble), the duty swept, the GPU's power and SM clock
sampled on a thread, and a line fitted through median power against the busy share the CUDA
events measured. Its intercept is the idle draw at the working clock. Two kernels (a decode-shaped
GEMM that reads its weights, memory-bound; a square GEMM, compute-bound) and two cycle lengths (a
few ms, as decode steps are) check that the intercept is the GPU's, not the kernel's or the gap's;
settings whose clock fell (the GPU at its limit) are kept in the file but not fitted.

    python -m benchmarks.idle_power --out idle-power.json     # CUDA only; ~90 s
"""

from __future__ import annotations

import argparse
import json
import random
import threading
import time
from pathlib import Path

import numpy as np

from bubblelab.core.files import write_atomic
from bubblelab.costmodel.power import fit_idle

DUTIES = (0.1, 0.2, 0.35, 0.5)  # on an H200 both GEMMs reach 700 W over ~0.7
PERIODS_MS = (3.0, 8.0)
CLOCK_HELD = 0.99  # a setting's median SM clock at least this share of the top one: not throttled


class Sampler:
    """(seconds since start, SM clock MHz, power W) every `period_s` on a thread."""

    def __init__(self, torch, device, period_s: float = 0.02):
        self.torch, self.device, self.period_s = torch, device, period_s
        self.rows: list[tuple[float, float, float]] = []
        self._stop = threading.Event()

    def __enter__(self) -> Sampler:
        self.t0 = time.perf_counter()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        cuda = self.torch.cuda
        while not self._stop.wait(self.period_s):
            self.rows.append((time.perf_counter() - self.t0, cuda.clock_rate(self.device),
                              cuda.power_draw(self.device) / 1e3))  # fmt: skip

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def kernels(torch, device) -> dict:
    """name -> a function that launches one kernel (bf16): a decode step's GEMM (128 rows against a
    4096 x 14336 weight), a square 4096 GEMM (compute-bound) and a 512 MiB copy (memory-bound, the
    coolest: it can run near full duty under the limit)."""
    bf = dict(device=device, dtype=torch.bfloat16)
    x, w = torch.randn(128, 4096, **bf), torch.randn(4096, 14336, **bf)
    a, b = torch.randn(4096, 4096, **bf), torch.randn(4096, 4096, **bf)
    out1, out2 = torch.empty(128, 14336, **bf), torch.empty(4096, 4096, **bf)
    src, dst = torch.randn(256 << 20, **bf), torch.empty(256 << 20, **bf)
    return {"decode_gemm": lambda: torch.mm(x, w, out=out1),
            "square_gemm": lambda: torch.mm(a, b, out=out2),
            "copy": lambda: dst.copy_(src)}  # fmt: skip


def kernel_ms(torch, launch, n: int = 200) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(n):
        launch()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / n


def run_setting(torch, device, launch, per_kernel_ms: float, duty: float, period_ms: float,
                seconds: float, settle_s: float) -> dict:  # fmt: skip
    """Cycles of (n kernels, then spin to the cycle's end) for `seconds`; the busy share the events
    timed and the median clock and power sampled after the first `settle_s` (the driver's power
    reading averages over a window)."""
    n = max(1, round(duty * period_ms / per_kernel_ms))
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(int(seconds * 1e3 / period_ms) + 2)]  # fmt: skip
    busy_ms, used = 0.0, 0
    with Sampler(torch, device) as sampler:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds and used < len(events):
            cycle0 = time.perf_counter()
            e0, e1 = events[used]
            e0.record()
            for _ in range(n):
                launch()
            e1.record()
            e1.synchronize()
            if time.perf_counter() - t0 > settle_s:
                busy_ms += e0.elapsed_time(e1)
            used += 1
            while duty < 1 and time.perf_counter() - cycle0 < period_ms / 1e3:
                pass  # the host's bubble: the GPU has nothing queued
        wall = time.perf_counter() - t0
    kept = [r for r in sampler.rows if r[0] > settle_s]
    mhz, watts = (np.median([r[i] for r in kept]) for i in (1, 2))
    return {"duty_asked": duty, "period_ms": period_ms, "kernels_a_cycle": n,
            "busy_share": busy_ms / ((wall - settle_s) * 1e3), "sm_clock_mhz": float(mhz),
            "power_w": float(watts), "samples": len(kept)}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seconds", type=float, default=3.0, help="each setting's length")
    ap.add_argument("--settle-s", type=float, default=1.2, help="not sampled at its start")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("idle_power measures a CUDA GPU; none is visible")
    device = torch.device("cuda", 0)
    launches = kernels(torch, device)
    for launch in launches.values():  # warm: cuBLAS picks its kernels
        kernel_ms(torch, launch, 20)
    per = {name: kernel_ms(torch, launch) for name, launch in launches.items()}
    plan = [(name, d, p) for name in launches for p in PERIODS_MS for d in DUTIES]
    plan += [(name, 1.0, PERIODS_MS[0]) for name in launches]
    random.Random(a.seed).shuffle(plan)  # drift (warming up, a neighbour) spread over every line
    rows = []
    for i, (name, duty, period) in enumerate(plan, 1):
        row = run_setting(torch, device, launches[name], per[name], duty, period, a.seconds,
                          a.settle_s)  # fmt: skip
        rows.append({"kernel": name, **row})
        print(f"[{i}/{len(plan)}] {name} duty {duty:.2f} period {period:g} ms: busy "
              f"{row['busy_share']:.3f}, {row['power_w']:.0f} W, {row['sm_clock_mhz']:.0f} MHz",
              flush=True)  # fmt: skip
    top = max(r["sm_clock_mhz"] for r in rows)
    fits = {}
    for name in launches:
        for period in PERIODS_MS:
            held = [r for r in rows if r["kernel"] == name and r["sm_clock_mhz"] >= CLOCK_HELD * top
                    and (r["period_ms"] == period or r["duty_asked"] == 1.0)]  # fmt: skip
            try:
                fits[f"{name}@{period:g}ms"] = fit_idle(
                    [r["busy_share"] for r in held], [r["power_w"] for r in held]
                )
            except ValueError as err:
                fits[f"{name}@{period:g}ms"] = {"error": str(err)}
    idles = [f["idle_w"] for f in fits.values() if "idle_w" in f]
    record = {
        "gpu": torch.cuda.get_device_name(device),
        "kernel_ms": per, "top_sm_clock_mhz": top,
        "settings": rows, "fits": fits,
        "idle_w": float(np.median(idles)) if idles else None,
        "idle_w_range": [min(idles), max(idles)] if idles else None,
    }  # fmt: skip
    write_atomic(a.out, json.dumps(record, indent=1) + "\n")
    print(json.dumps({k: record[k] for k in ("gpu", "idle_w", "idle_w_range", "fits")}, indent=1))


if __name__ == "__main__":
    main()
