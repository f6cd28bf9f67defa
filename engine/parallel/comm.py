"""Tensor-parallel collectives and the process group they run on.

A tensor-parallel engine owns torch.distributed's default process group in each of its processes:
gloo on the CPU, NCCL on CUDA (one GPU per rank, rank r on cuda:r). The model calls the two
collectives below; at size 1 the parallel layers never call them, so a single-GPU forward is exactly
the unsharded one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from ...core.errors import BubblelabError
from .. import pdl
from ..config import ModelConfig

# NVLink multicast (NVLS) and symmetric-memory multimem ops stay off: the GPU machines require it,
# and these are set in every process the engine starts and in the parent before NCCL initialises.
NO_MULTICAST_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


@dataclass(frozen=True)
class TensorParallel:
    """This process's place in the tensor-parallel group."""

    rank: int = 0
    size: int = 1

    def split(self, n: int, what: str) -> int:
        """n / size, refusing a split that would not be even."""
        if n % self.size:
            raise BubblelabError(
                f"tensor parallel {self.size} does not divide the model's {what} ({n})"
            )
        return n // self.size


SINGLE = TensorParallel()


def check_split(cfg: ModelConfig, size: int) -> None:
    """Refuse a tensor-parallel size that does not divide what the layers split (BubblelabError)."""
    tp = TensorParallel(0, size)
    tp.split(cfg.num_heads, "attention heads")
    tp.split(cfg.num_kv_heads, "KV heads")
    tp.split(cfg.intermediate_size, "intermediate size")


def set_no_multicast_env() -> None:
    """In this process, and so in every process it starts from now on."""
    os.environ.update(NO_MULTICAST_ENV)


def init_group(
    tp: TensorParallel, device: torch.device, store: dist.Store, timeout_s: float
) -> None:
    """Join the default process group as tp.rank (every rank calls this with the same store)."""
    set_no_multicast_env()
    cuda = device.type == "cuda"
    dist.init_process_group(
        "nccl" if cuda else "gloo",
        store=store,
        rank=tp.rank,
        world_size=tp.size,
        timeout=timedelta(seconds=timeout_s),
        # NCCL communicators are created now, not inside the first CUDA-graph capture.
        device_id=device if cuda else None,
    )


def close_group(abort: bool = False) -> None:
    """Leave the process group; `abort` when a peer died or hangs (a clean destroy could wait for it
    forever)."""
    if not dist.is_initialized():
        return
    if abort:
        try:
            from torch.distributed.distributed_c10d import _abort_process_group

            _abort_process_group()
            return
        except Exception:  # noqa: BLE001 - a backend without abort: fall back to destroy
            pass
    dist.destroy_process_group()


def all_reduce(x: torch.Tensor) -> torch.Tensor:
    """Sum over ranks, in place (captured into CUDA graphs like any kernel: NCCL supports
    capture)."""
    if x.is_cuda:
        pdl.foreign_kernel()
    dist.all_reduce(x)
    return x


def min_over_ranks(value: int, device: torch.device) -> int:
    """The smallest of every rank's `value` (on the device NCCL needs; gloo takes a CPU tensor)."""
    t = torch.tensor([value], dtype=torch.int64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return int(t.item())


_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def all_gather_last(x: torch.Tensor, size: int) -> torch.Tensor:
    """[rows, n] on every rank -> [rows, size * n], rank r's columns at [r * n, (r + 1) * n)."""
    rows, n = x.shape
    out = x.new_empty((size * rows, n))  # rank-major, the layout every backend accepts
    _gather_single(out, x.contiguous())
    return out.view(size, rows, n).transpose(0, 1).reshape(rows, size * n)
