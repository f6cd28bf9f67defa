"""Every projection's GEMM, y = x @ w.T: cuBLAS, or the skinny Triton kernel where this GPU's tuned
table (gemm_tables/<gpu>.json, written by benchmarks/gemm_tune.py) measured it faster for the
weight's shape and that many rows.

The table is read once per device name and fixed for the process: the same rows always take the
same kernel, so depth 1 and depth 2 compute the same numbers. A row count the table did not tune
takes the entry of the next larger one it did; past the largest, and for shapes, dtypes or GPUs
without a table, cuBLAS. BUBBLELAB_TRITON_GEMM=0 turns the table off and BUBBLELAB_GEMM_TABLE=<path>
reads another one in its place; `using_table(path)` does the same in-process (A/B measurements).
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.nn.functional as F

from . import pdl

TABLE_DIR = Path(__file__).parent / "gemm_tables"
_override: Path | None = None  # set by using_table()


def table_path(device_name: str) -> Path:
    """The table of a GPU of this name: 'NVIDIA H100 80GB HBM3' -> nvidia_h100_80gb_hbm3.json"""
    slug = re.sub(r"[^a-z0-9]+", "_", device_name.lower()).strip("_")
    return TABLE_DIR / f"{slug}.json"


def _table(device_name: str) -> dict[tuple[int, int], tuple[list[int], list[dict | None]]]:
    return _read_cached(_override) if _override is not None else _default_table(device_name)


@functools.cache  # the environment is read once: the process keeps one table
def _default_table(device_name: str) -> dict[tuple[int, int], tuple[list[int], list[dict | None]]]:
    if os.environ.get("BUBBLELAB_TRITON_GEMM", "1") == "0":
        return {}
    chosen = os.environ.get("BUBBLELAB_GEMM_TABLE")
    if chosen:
        if not Path(chosen).is_file():
            raise FileNotFoundError(f"BUBBLELAB_GEMM_TABLE names no file: {chosen}")
        return _read_cached(Path(chosen))
    path = table_path(device_name)
    return _read_cached(path) if path.exists() else {}


@functools.cache
def _read_cached(path: Path) -> dict[tuple[int, int], tuple[list[int], list[dict | None]]]:
    return read_table(path)


@contextlib.contextmanager
def using_table(path: Path) -> Iterator[None]:
    """GEMMs launched (or graphs captured) inside follow this table: an A/B benchmark's variants."""
    global _override
    if not Path(path).is_file():
        raise FileNotFoundError(f"no GEMM table at {path}")
    before, _override = _override, Path(path)
    try:
        yield
    finally:
        _override = before


def read_table(path: Path) -> dict[tuple[int, int], tuple[list[int], list[dict | None]]]:
    """(N, K) -> (tuned row counts ascending, each one's config or None for cuBLAS)."""
    shapes = json.loads(path.read_text())["shapes"]
    table = {}
    for shape, by_rows in shapes.items():
        n, k = (int(v) for v in shape.split("x"))
        rows = sorted(int(m) for m in by_rows)
        table[(n, k)] = (rows, [by_rows[str(m)].get("config") for m in rows])
    return table


@functools.cache
def _device_name(index: int) -> str:
    return torch.cuda.get_device_name(index)


def choice(x: torch.Tensor, weight: torch.Tensor) -> dict | None:
    """The tuned Triton config for this GEMM, or None for cuBLAS."""
    if not x.is_cuda or x.dim() != 2 or x.dtype != torch.bfloat16 or weight.dtype != x.dtype:
        return None
    n, k = weight.shape
    entry = _table(_device_name(x.device.index or 0)).get((n, k))
    return None if entry is None else config_for(entry, x.shape[0])


def config_for(entry: tuple[list[int], list[dict | None]], rows: int) -> dict | None:
    """A shape's entry for this many rows: the next tuned row count's; None past the largest."""
    tuned, configs = entry
    at = bisect.bisect_left(tuned, rows)
    return configs[at] if at < len(tuned) else None


def linear(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """x [M, K] @ weight[N, K].T, into `out` when given."""
    config = choice(x, weight) if x.stride(-1) == 1 and weight.stride(-1) == 1 else None
    if config is not None:
        from .triton_gemm import TileConfig, skinny_matmul  # Triton: imported only where it runs

        return skinny_matmul(x, weight, TileConfig(**config), out)
    if x.is_cuda:
        pdl.foreign_kernel()
    if out is None:
        return F.linear(x, weight)
    return torch.mm(x, weight.t(), out=out)
