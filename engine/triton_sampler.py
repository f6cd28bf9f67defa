"""sampler.temperature_sample as two Triton kernels: split the vocabulary, then merge.

Compiled by Inductor the same math is one reduction program per row: at batch 128 that is 128
programs walking 151,936 columns each, 0.14 ms a step on an H100, mostly waiting. Here each row's
columns are cut into SPLIT-column chunks, every (row, chunk) program reads its logits once and
keeps two running maxima (the raw logit for greedy rows, logit / temperature + Gumbel noise for
sampled ones), and a second kernel merges the chunks of each row. Ties go to the lowest column at
both levels, as torch.argmax does, so the answer is the same whatever the chunking.

The noise is sampler.gumbel_noise's: the same lowbias32 hash of (row key xor column key), here in
uint32 arithmetic (products wrap mod 2^32 exactly as the int64 `& 0xFFFFFFFF` form does).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

SPLIT = 4096  # columns per program: ~37 chunks a row for a 152k vocabulary
BLOCK = 1024  # columns per loop iteration


@triton.jit
def _mix32(x, MUL1: tl.constexpr, MUL2: tl.constexpr):
    x = x ^ (x >> 16)
    x = x * tl.full([], MUL1, tl.uint32)
    x = x ^ (x >> 15)
    x = x * tl.full([], MUL2, tl.uint32)
    return x ^ (x >> 15)


@triton.jit
def _sample_partial_kernel(
    LOGITS,
    TEMP,
    SEED,
    COUNTER,
    PART_VAL,
    PART_IDX,
    vocab,
    stride_l,
    num_chunks,
    GOLDEN: tl.constexpr,
    MUL1: tl.constexpr,
    MUL2: tl.constexpr,
    SPLIT: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row, chunk = tl.program_id(0), tl.program_id(1)
    temp = tl.load(TEMP + row)
    sampled = temp > 0
    temp = tl.where(sampled, temp, 1.0)
    golden = tl.full([], GOLDEN, tl.uint32)
    seed = tl.load(SEED + row).to(tl.uint32)
    counter = tl.load(COUNTER + row).to(tl.uint32)
    row_key = _mix32(_mix32(seed, MUL1, MUL2) ^ (counter * golden), MUL1, MUL2)
    best_val = tl.full([BLOCK], float("-inf"), tl.float32)
    best_idx = tl.full([BLOCK], 2147483647, tl.int32)
    for start in range(chunk * SPLIT, chunk * SPLIT + SPLIT, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        valid = cols < vocab
        x = tl.load(LOGITS + row.to(tl.int64) * stride_l + cols, mask=valid, other=0.0)
        x = x.to(tl.float32)
        if sampled:
            col_key = _mix32(cols.to(tl.uint32) * golden, MUL1, MUL2)
            bits = _mix32(row_key ^ col_key, MUL1, MUL2) >> 9
            uniform = (bits.to(tl.float32) + 0.5) * (1.0 / 8388608.0)
            x = tl.math.div_rn(x, temp) - tl.log(-tl.log(uniform))
        x = tl.where(valid, x, float("-inf"))
        # strictly greater: an earlier column keeps a tie
        better = (x > best_val) | ((x == best_val) & (cols < best_idx))
        best_val = tl.where(better, x, best_val)
        best_idx = tl.where(better, cols, best_idx)
    val = tl.max(best_val, 0)
    idx = tl.min(tl.where(best_val == val, best_idx, 2147483647), 0)
    tl.store(PART_VAL + row * num_chunks + chunk, val)
    tl.store(PART_IDX + row * num_chunks + chunk, idx)


@triton.jit
def _sample_merge_kernel(PART_VAL, PART_IDX, OUT, num_chunks, BLOCK_C: tl.constexpr):
    row = tl.program_id(0)
    c = tl.arange(0, BLOCK_C)
    valid = c < num_chunks
    val = tl.load(PART_VAL + row * num_chunks + c, mask=valid, other=float("-inf"))
    idx = tl.load(PART_IDX + row * num_chunks + c, mask=valid, other=2147483647)
    best = tl.max(val, 0)
    tl.store(OUT + row, tl.min(tl.where(val == best, idx, 2147483647), 0).to(tl.int64))


def temperature_sample(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    seed: torch.Tensor,
    counter: torch.Tensor,
    hash_constants: tuple[int, int, int],
) -> torch.Tensor:
    """[B, V] logits (any float dtype, unit stride along V) -> [B] int64: argmax where temperature
    is 0, else Gumbel-max over logits / temperature with sampler's counter-based noise, whose
    (golden, mul1, mul2) constants the sampler hands over (it owns the noise's definition)."""
    golden, mul1, mul2 = hash_constants
    rows, vocab = logits.shape
    out = torch.empty(rows, dtype=torch.int64, device=logits.device)
    if rows == 0:
        return out
    num_chunks = triton.cdiv(vocab, SPLIT)
    part_val = torch.empty(rows, num_chunks, dtype=torch.float32, device=logits.device)
    part_idx = torch.empty(rows, num_chunks, dtype=torch.int32, device=logits.device)
    _sample_partial_kernel[(rows, num_chunks)](
        logits,
        temperature,
        seed,
        counter,
        part_val,
        part_idx,
        vocab,
        logits.stride(0),
        num_chunks,
        GOLDEN=golden,
        MUL1=mul1,
        MUL2=mul2,
        SPLIT=SPLIT,
        BLOCK=BLOCK,
        num_warps=4,
        enable_fp_fusion=False,  # the math rounds as eager's does
    )
    _sample_merge_kernel[(rows,)](
        part_val, part_idx, out, num_chunks, BLOCK_C=triton.next_power_of_2(num_chunks)
    )
    return out
