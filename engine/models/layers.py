"""Building blocks of the Llama and Qwen3 families: RMSNorm, SiLU-and-mul, rotary embedding.

The elementwise chains are plain PyTorch. A Fusable module's @fused methods run through
torch.compile once its `compiled` flag is set (TransformerLM.set_compile); Inductor then emits one
kernel per chain where eager PyTorch launches one per op (~7 for the fp32 RMSNorm). That is what
decode time is made of: inside a CUDA graph each launch still costs ~2.5 us.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from ...core.errors import BubblelabError
from .. import fusion, linear

if TYPE_CHECKING:
    from ..triton_gemm import TileConfig


class Fusable(nn.Module):
    """A module whose @fused methods run torch.compile'd when `compiled` is set, else eagerly."""

    compiled: bool = False


def fused(method: Callable) -> Callable:
    """Decorates a Fusable's method: compiled at the first call with `compiled` set, else eager."""

    @functools.wraps(method)
    def call(self: Fusable, *args):
        # Not while compiling: inside another fused method this one is just inlined.
        if self.compiled and not torch.compiler.is_compiling():
            return _compile(method)(self, *args)
        return method(self, *args)

    return call


@functools.cache
def _compile(method: Callable) -> Callable:
    # dynamic=True: one graph for every token count (Dynamo still gives size 1 its own), so decode
    # buckets and prefill lengths do not recompile. emulate_precision_casts: round intermediates to
    # the tensor dtype like eager does, so bf16 results match the eager model (and transformers)
    # instead of being "more precise".
    return torch.compile(method, dynamic=True, options={"emulate_precision_casts": True})


class RMSNorm(Fusable):
    triton = False  # the Triton kernel (models/triton_fused.py) instead: TransformerLM.set_compile

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(
        self, x: torch.Tensor, residual: torch.Tensor | None = None
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """norm(x); with a residual, vLLM's fused form: (norm(x + residual), x + residual)."""
        if self.triton:
            from .triton_fused import rms_norm  # Triton: imported only where it runs

            return rms_norm(x, self.weight, self.eps, residual)
        return self.norm(x) if residual is None else self.add_norm(x, residual)

    # Two compiled methods, not one with a branch: Dynamo's recompile limit counts per function.
    @fused
    def norm(self, x: torch.Tensor) -> torch.Tensor:
        # Normalise in fp32 and scale after casting back, exactly as transformers does. F.rms_norm
        # rather than the spelled-out formula: under dynamic=True a float eps read in the formula
        # becomes a per-call tensor input, while an op argument is baked into the kernel.
        h = F.rms_norm(x.float(), (x.shape[-1],), eps=self.eps)
        return self.weight * h.to(x.dtype)

    @fused
    def add_norm(
        self, x: torch.Tensor, residual: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        x = x + residual
        return self.norm(x), x


class SiluAndMul(Fusable):
    """The gated MLP activation over the fused gate|up projection: silu(gate) * up."""

    triton = False  # the Triton kernel (models/triton_fused.py) instead: TransformerLM.set_compile

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.triton:
            from .triton_fused import silu_and_mul  # Triton: imported only where it runs

            return silu_and_mul(x)
        return self.act(x)

    @fused
    def act(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = x.chunk(2, dim=-1)
        return F.silu(gate) * up


def norm_linear(
    norm: RMSNorm,
    weight: torch.Tensor,
    x: torch.Tensor,
    residual: torch.Tensor | None,
    act: SiluAndMul | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(act(linear(norm(x + residual), weight)), x + residual): a decoder layer's norm and the
    projection after it (and gate|up's activation). Where the GEMM table runs that projection as
    a one-row GEMV, the norm and the activation fold into its kernel (engine/fusion.py)."""
    config = _gemv_config(x, weight)
    fold_norm = config is not None and norm.triton and fusion.enabled("norm")
    fold_act = config is not None and act is not None and act.triton and fusion.enabled("silu")
    folded: dict = {}
    new_residual = x  # the first layer's, norm folded or not: its input
    if fold_norm:  # the GEMV adds the residual and normalises as it loads x
        folded = dict(norm_weight=norm.weight, eps=norm.eps, residual=residual)
    else:
        x, new_residual = (norm(x), x) if residual is None else norm(x, residual)
    if config is None or not (fold_norm or fold_act):
        y = linear.linear(x, weight)
    else:
        from ..fused_gemv import fused_gemv  # Triton: imported only where it runs

        y, added = fused_gemv(x, weight, config, glu=fold_act, **folded)
        new_residual = new_residual if added is None else added
    return (y if act is None or fold_act else act(y)), new_residual


def _gemv_config(x: torch.Tensor, weight: torch.Tensor) -> TileConfig | None:
    """The table's tiles for this projection when they are the one-row GEMV form, else None."""
    if x.dim() != 2 or x.shape[0] != 1 or not x.is_contiguous():
        return None
    config = linear.choice(x, weight)
    if config is None or config["block_m"] != 1 or config.get("split_k", 1) != 1:
        return None
    from ..triton_gemm import TileConfig  # Triton: imported only where it runs

    return TileConfig(**config)


def rope_inv_freq(head_dim: int, theta: float, scaling: dict | None) -> torch.Tensor:
    """Inverse frequencies [head_dim // 2] in fp32, for rope scaling none, linear or llama3."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    scaling = scaling or {}
    rope_type = scaling.get("rope_type", scaling.get("type", "default"))
    if rope_type == "default":
        return inv_freq
    if rope_type == "linear":
        return inv_freq / scaling["factor"]
    if rope_type == "llama3":
        factor, old_len = scaling["factor"], scaling["original_max_position_embeddings"]
        low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
        wavelen = 2 * math.pi / inv_freq
        # Long wavelengths are divided by factor, short ones kept, the band between interpolated.
        scaled = torch.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
        smooth = (old_len / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelen >= old_len / high) & (wavelen <= old_len / low)
        return torch.where(medium, smoothed, scaled)
    raise BubblelabError(f"unsupported rope scaling {rope_type!r}; supported: none, linear, llama3")


class RotaryEmbedding(nn.Module):
    """Neox-style RoPE from a cos|sin table precomputed once in fp32 and indexed by position."""

    cos_sin_cache: torch.Tensor  # a non-persistent buffer, [max_positions, head_dim]

    def __init__(self, head_dim: int, max_positions: int, theta: float, scaling: dict | None):
        super().__init__()
        self.head_dim, self.max_positions, self.theta, self.scaling = (
            head_dim,
            max_positions,
            theta,
            scaling,
        )
        self.register_buffer(
            "cos_sin_cache",
            torch.empty(max_positions, head_dim, dtype=torch.float32),
            persistent=False,
        )
        self.reset_cache()

    def reset_cache(self) -> None:
        """(Re)computes the table on the buffer's device, e.g. after a meta-device build and
        to_empty()."""
        device = self.cos_sin_cache.device
        inv_freq = rope_inv_freq(self.head_dim, self.theta, self.scaling).to(device)
        freqs = torch.outer(
            torch.arange(self.max_positions, dtype=torch.float32, device=device), inv_freq
        )
        self.cos_sin_cache = torch.cat([freqs.cos(), freqs.sin()], dim=-1)

    def forward(
        self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        cos, sin = self.cos_sin_cache[positions].unsqueeze(1).chunk(2, dim=-1)  # [N, 1, D/2] each
        return _rotate(q, cos, sin), _rotate(k, cos, sin)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
