"""Programmatic dependent launch (PDL, Hopper and later) for the engine's own Triton kernels.

A decode step at small batch is ~10 kernels a layer, most of them a few microseconds long, and
inside a CUDA graph each still waits for the one before it to drain before its blocks are even
scheduled. Launched with PDL, a kernel's blocks may start while the kernel before it on the stream
is still running: they read what no kernel writes (a GEMM's weights), then `gdc_wait` until every
earlier kernel has finished and its writes are visible, then let the next kernel start
(`gdc_launch_dependents`). Everything that reads an activation or writes anything comes after the
wait, so a step computes exactly what it computes without PDL, in the same order (a GPU test
compares the two bit for bit).

The kernels take a `PDL` constexpr and `launch_options(device)` gives their launch its two
keywords. By default (mode `own`) a kernel is launched with PDL only when the kernel before it is
one of ours: the places that launch someone else's kernel (cuBLAS in linear.py, the embedding,
NCCL's all-reduce) call `foreign_kernel()`. Behind a cuBLAS GEMM our early blocks cost more than
they saved: on an H200 (qwen3-4b, benchmarks/pdl_ab.py) PDL after every kernel made the 32-row
forward 5% slower, after our own only 1%, while both made the one-row forward ~5% faster. A missed
site costs speed, never correctness: the wait always waits for the whole kernel before.
Forwards of more than MAX_ROWS rows run without it (ModelRunner says how many: `step_rows`).
BUBBLELAB_PDL=0|off, all, own or own-mma chooses (A/B measurements); `using(mode)` does in-process.
In one-row forwards decode attention and its merge, add+RMSNorm and SiLU*mul also release the next
kernels before they wait (EARLY_ROWS), so the weight reads of the GEMV after each run under a kernel
that leaves the bus idle. On an H200 (engine, one stream, depth 2) attention alone gained 0.5%
(qwen3-4b) and 1.2% (qwen3-8b); norm and silu with it a further 2.7% on qwen3-4b and -0.1% on
qwen3-8b; q/k norm+RoPE cost 3.1%, so it waits first. The GEMV gained nothing beside attention
alone, but beside norm and silu a further 0.4% (qwen3-4b) and 0.2% (qwen3-8b): the norm or SiLU
after it then starts under its last wave and releases the next GEMV, whose first weight tiles load
there. At 8 rows the forward lost 0.6-1.3%. Which kinds release first in one-row forwards is
BUBBLELAB_PDL_EARLY's (a comma list of KINDS, all or none; `releasing(kinds)` in-process).
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator

import torch

from .fusion import parse_set

try:  # linear.py reports cuBLAS launches here on any install; the kernels need Triton
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - a CPU install without Triton
    triton = None

HAS_GDC = False
if triton is not None:
    try:  # Triton >= 3.5
        from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

        HAS_GDC = True
    except ImportError:  # pragma: no cover - older Triton: never reached, PDL stays off

        @triton.jit
        def gdc_wait():
            pass

        @triton.jit
        def gdc_launch_dependents():
            pass

    @triton.jit
    def wait_for_inputs(PDL: tl.constexpr):
        """Called by a PDL-aware kernel before its first read of an activation and its first
        write: waits for every earlier kernel, then lets the next one start its own preamble.
        PDL 2 lets the next one start first (RELEASE_EARLY): its blocks become resident while
        this kernel runs, and its own wait still waits for this kernel, and so for all before."""
        if PDL == 2:
            gdc_launch_dependents()
            gdc_wait()
        elif PDL:
            gdc_wait()
            gdc_launch_dependents()


MODES = ("off", "all", "own", "own-mma")
# What a launch site says it launches: the one-row GEMV, a GEMM's MMA form, decode attention and
# its merge, add+RMSNorm, q/k norm+RoPE, SiLU*mul.
KINDS = ("gemv", "mma", "attention", "norm", "qk", "silu")
RELEASE_EARLY = 2  # a kernel's PDL constexpr: its dependents may start before it waits
EARLY_ROWS = 1  # forwards of at most this many rows let some kinds release first
# Those kinds, unless BUBBLELAB_PDL_EARLY says otherwise (docs/engine-speed.md, the per-kind A/B).
EARLY_KINDS = frozenset({"attention", "norm", "silu", "gemv"})
# Forwards of more rows run without PDL. On H200s (docs/engine-speed.md) it gained at 1, 8 and 16
# rows in every call, lost up to 3.8% at 4 rows of qwen3-8b in one, and gained nothing or lost at
# 32-128 (qwen3-8b at 32 rows: -2.7%), where the GEMMs are cuBLAS or MMA tiles of 32 rows.
MAX_ROWS = 16
_mode: str | None = None  # set by using(), which also lifts MAX_ROWS; else BUBBLELAB_PDL
_early: frozenset[str] | None = None  # set by releasing(); else BUBBLELAB_PDL_EARLY
_rows: int | None = None  # the forward being launched: step_rows()
_after_foreign = False  # the last kernel launched was someone else's (cuBLAS): foreign_kernel()


@functools.cache
def _supported(index: int) -> bool:
    return HAS_GDC and torch.cuda.get_device_capability(index)[0] >= 9


def mode() -> str:
    """off; all (every PDL-aware kernel); own (only one that follows another of ours); own-mma
    (own, but never a GEMM's MMA form: A/B only)."""
    raw = os.environ.get("BUBBLELAB_PDL", "own")
    chosen = _mode or {"0": "off", "1": "all"}.get(raw, raw)
    if chosen not in MODES:
        raise ValueError(f"BUBBLELAB_PDL must be 0, 1 or one of {MODES}: got {raw!r}")
    return chosen


def enabled(device: torch.device) -> bool:
    """Whether kernels launched now on `device` may use PDL: CUDA on sm90+, not switched off."""
    if device.type != "cuda" or mode() == "off":
        return False
    if _mode is None and _rows is not None and _rows > MAX_ROWS:
        return False
    return _supported(device.index if device.index is not None else torch.cuda.current_device())


def foreign_kernel() -> None:
    """Called where a kernel that is not one of ours is launched (a cuBLAS GEMM, NCCL)."""
    global _after_foreign
    _after_foreign = True


def parse_kinds(text: str) -> frozenset[str]:
    """'all', 'none' or a comma list of KINDS -> the set it names."""
    return parse_set(text, KINDS, "kernel kind")


def early_kinds() -> frozenset[str]:
    """The kinds of kernel that release the next ones before they wait, in one-row forwards."""
    if _early is not None:
        return _early
    chosen = os.environ.get("BUBBLELAB_PDL_EARLY")
    return EARLY_KINDS if chosen is None else parse_kinds(chosen)


def launch_options(device: torch.device, kind: str = "") -> dict[str, bool | int]:
    """The keywords of a PDL-aware kernel's launch: its `PDL` constexpr and Triton's launch flag.

    kind: one of KINDS, what is launched. A GEMM's MMA form (`mma`) has blocks that, launched early,
    land on whichever SMs the kernel before leaves free. Only `own-mma` makes it wait: on H200s that
    made the forward faster when one graph was replayed back to back and slower inside the engine,
    at 1 and at 4 rows (docs/engine-speed.md), so the engine keeps starting it early. In forwards
    of at most EARLY_ROWS rows the early_kinds() let the next kernels start before they wait:
    decode attention, a norm or SiLU*mul leaves the memory bus idle, so the weight reads after it
    run under it; a GEMV's last wave lets the norm or SiLU after it start, which releases the next.
    """
    if kind and kind not in KINDS:
        raise ValueError(f"unknown kernel kind {kind!r}: one of {KINDS}")
    global _after_foreign
    after_foreign, _after_foreign = _after_foreign, False
    chosen = mode()
    own = chosen.startswith("own")
    if not enabled(device) or (after_foreign and own) or (kind == "mma" and chosen == "own-mma"):
        return {"PDL": False}
    if own and _rows is not None and _rows <= EARLY_ROWS and kind in early_kinds():
        return {"PDL": RELEASE_EARLY, "launch_pdl": True}
    return {"PDL": True, "launch_pdl": True}


@contextlib.contextmanager
def step_rows(rows: int) -> Iterator[None]:
    """The kernels launched inside belong to a forward of `rows` rows (tokens, for a prefill)."""
    global _rows
    before, _rows = _rows, rows
    try:
        yield
    finally:
        _rows = before


@contextlib.contextmanager
def using(chosen: str) -> Iterator[None]:
    """Kernels launched (or graphs captured) inside use this mode at any row count: an A/B
    benchmark's variants."""
    global _mode
    if chosen not in MODES:
        raise ValueError(f"PDL mode must be one of {MODES}, got {chosen!r}")
    before, _mode = _mode, chosen
    try:
        yield
    finally:
        _mode = before


@contextlib.contextmanager
def releasing(kinds: str) -> Iterator[None]:
    """Kernels launched (or graphs captured) inside release first for these kinds ('all', 'none'
    or a comma list of KINDS), in one-row forwards: an A/B benchmark's variants."""
    global _early
    before, _early = _early, parse_kinds(kinds)
    try:
        yield
    finally:
        _early = before
