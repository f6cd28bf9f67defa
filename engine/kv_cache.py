"""The paged KV pool: how many pages fit, and one tensor holding every layer's K and V pages.

Page index `num_blocks` (one past the pool) is the scratch page: padded graph rows and padding
prefill tokens write their K/V there, and it is never handed out.
"""

from __future__ import annotations

import torch

from ..core.errors import BubblelabError
from .config import EngineConfig, ModelConfig
from .parallel.comm import SINGLE, TensorParallel, min_over_ranks

# GPU memory kept out of the pool: slots, logits, graph pools, the largest prefill's activations.
GPU_HEADROOM_BYTES = 2 << 30


def allocate_kv_pool(
    config: EngineConfig,
    mc: ModelConfig,
    dtype: torch.dtype,
    device: torch.device,
    tp: TensorParallel = SINGLE,
) -> torch.Tensor:
    """[2, layers, num_blocks + 1, block_size, kv_heads, head_dim] zeros: enough pages for every
    sequence at max_model_len, or what the budget allows (config.num_kv_blocks when given).

    Under tensor parallelism a rank holds its KV heads only, and every rank takes the smallest page
    count any rank can afford: rank 0's block manager hands out page ids that index every rank's
    pool."""
    bs = config.block_size
    kv_heads = tp.split(mc.num_kv_heads, "KV heads")
    per_block = 2 * mc.num_layers * bs * kv_heads * mc.head_dim * dtype.itemsize
    pages_per_seq = -(-config.max_model_len // bs)
    wanted = config.max_num_seqs * pages_per_seq
    if config.num_kv_blocks is not None:
        num_blocks = config.num_kv_blocks
    elif device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        budget = free - (1 - config.gpu_memory_utilization) * total - GPU_HEADROOM_BYTES
        num_blocks = min(wanted, int(budget // per_block))
    else:
        num_blocks = min(wanted, config.kv_cache_bytes // per_block)
    if tp.size > 1:
        num_blocks = min_over_ranks(num_blocks, device)
    if num_blocks < pages_per_seq:
        raise BubblelabError(
            f"KV cache of {num_blocks} pages cannot hold one sequence of max_model_len="
            f"{config.max_model_len} ({pages_per_seq} pages); "
            "lower max_model_len or raise the budget"
        )
    shape = (2, mc.num_layers, num_blocks + 1, bs, kv_heads, mc.head_dim)
    return torch.zeros(shape, dtype=dtype, device=device)
