"""What the flash-attn-4 smoke stages share: the report that keeps every stage's result, CUDA
timing, the reference attention and paged-KV fixtures (tools/gpu_machine/fa4_smoke.py)."""

from __future__ import annotations

import contextlib
import json
import math
import time
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F

SHIM = Path(__file__).resolve().parent / "flash_attn_shim"
H, HKV, D = 32, 8, 128
DTYPE = torch.bfloat16
# bf16 outputs up to ~4 (1-token rows copy v): rounding alone reaches ~1e-2; a masking bug is O(0.1)
TOL = 3e-2


class Report:
    def __init__(self, out: Path | None, budget_s: float) -> None:
        self.out, self.deadline, self.t0 = out, time.monotonic() + budget_s, time.monotonic()
        self.stages: dict[str, dict] = {}

    @contextlib.contextmanager
    def stage(self, name: str):
        rec: dict = {"ok": False}
        self.stages[name] = rec
        t = time.perf_counter()
        if time.monotonic() > self.deadline:
            rec["skipped"] = "past --budget-s"
            print(f"[skip] {name}: past the time budget", flush=True)
            self.save()
            yield None
            return
        try:
            yield rec
            rec["ok"] = rec.get("ok_override", True)
        except Exception as exc:  # noqa: BLE001 - every failure is a finding, reported and not raised
            rec["error"] = f"{type(exc).__name__}: {exc}".strip()
            rec["traceback"] = traceback.format_exc()
        rec.pop("ok_override", None)
        rec["seconds"] = round(time.perf_counter() - t, 2)
        detail = rec.get("summary", "") if rec["ok"] else rec.get("error", "").splitlines()[0][:300]
        print(
            f"[{'ok' if rec['ok'] else 'FAIL'}] {name} ({rec['seconds']} s): {detail}", flush=True
        )
        if not rec["ok"]:
            print(rec["traceback"][-3000:], flush=True)
        self.save()

    def save(self) -> None:
        if self.out:
            self.out.mkdir(parents=True, exist_ok=True)
            (self.out / "fa4_smoke.json").write_text(json.dumps(self.stages, indent=1, default=str))


def cuda_time_ms(fn, reps: int = 20) -> float:
    """Median of per-call CUDA-event times after one untimed call."""
    fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2]


def ref_attn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """[Sq, H, D] x [Sk, Hkv, D] causal, aligned bottom-right (as FA), in fp32."""
    sq, sk = q.shape[0], k.shape[0]
    mask = torch.ones(sq, sk, dtype=torch.bool, device=q.device).tril(diagonal=sk - sq)
    o = F.scaled_dot_product_attention(
        q.float().transpose(0, 1),
        k.float().transpose(0, 1),
        v.float().transpose(0, 1),
        attn_mask=mask,
        scale=scale,
        enable_gqa=True,
    )
    return o.transpose(0, 1)


def max_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.float() - ref.float()).abs().max())


def check(rec: dict, err: float, what: str) -> None:
    rec[f"max_abs_err_{what}"] = err
    if not math.isfinite(err) or err > TOL:
        raise AssertionError(f"{what}: max abs error {err:.3g} > {TOL} (or not finite)")


def make_paged(lens: list[int], page: int, pad: int, nan_unused: bool, gen: torch.Generator):
    """K/V cache [pages, page, HKV, D] holding each sequence's keys on shuffled pages; table [B,
    max_pages]."""
    need = [-(-n // page) for n in lens]
    total = sum(need) + 4  # spare pages that nobody uses
    perm = torch.randperm(total, generator=gen).tolist()
    width = max(max(need), 1) + 2
    table = torch.full((len(lens), width), pad, dtype=torch.int32)
    k_cache = torch.randn(total, page, HKV, D, generator=gen).to(DTYPE)
    v_cache = torch.randn(total, page, HKV, D, generator=gen).to(DTYPE)
    used = set()
    start = 0
    for b, n in enumerate(need):
        table[b, :n] = torch.tensor(perm[start : start + n], dtype=torch.int32)
        used.update(perm[start : start + n])
        start += n
    if nan_unused:  # FA4 promises unused pages may hold anything, NaN included
        for p in set(range(total)) - used:
            k_cache[p] = float("nan")
            v_cache[p] = float("nan")
    return k_cache.cuda(), v_cache.cuda(), table.cuda()


def gather_ref(
    q: torch.Tensor, k_cache, v_cache, table, lens: list[int], scale: float
) -> torch.Tensor:
    out = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    page = k_cache.shape[1]
    for b, n in enumerate(lens):
        if n == 0:
            continue
        pages = table[b, : -(-n // page)].long()
        kb, vb = (c[pages].flatten(0, 1)[:n] for c in (k_cache, v_cache))
        out[b] = ref_attn(q[b], kb, vb, scale)
    return out
