"""Tunes the skinny Triton GEMM (engine/triton_gemm.py) against cuBLAS for every projection shape of
the given presets at each decode row count, and writes this GPU's table, which engine/linear.py then
follows: a shape and row count take the Triton config only where it beat cuBLAS by more than
--margin and its output was right.

Each candidate is timed as a decode step runs it: over enough copies of the weight to overflow L2
four times (a step streams every layer's weights, none is in L2 when read), each call after a small
elementwise kernel (as a norm precedes a projection), captured in one CUDA graph and replayed. Time
per GEMM = median replay / copies, less the elementwise kernels' own time, over --reps replays
after a warm-up. cuBLAS (torch.mm) is timed the same way in the same process. The output matched
against an fp32 product: within two bf16 rounding steps of the largest value.

Row counts the engine runs with programmatic dependent launch (engine/pdl.py: up to pdl.MAX_ROWS, on
a GPU that has it) are timed as the engine launches them (`--pdl auto`, the default): the kernel
before is the engine's Triton RMSNorm and both start early where the engine lets them, so a GEMV's
first weight tile is read under the norm's tail. On an H200 that changed the one-row choices of
qwen3-4b and qwen3-8b and made their forwards 3.4% and 5.3% faster (docs/engine-speed.md). `--pdl
on|off` forces it either way. --update replaces only the entries it tuned in the table it writes,
keeping the rest, and records the command beside the first.

    python -m benchmarks.gemm_tune --presets qwen3-4b,qwen3-8b        # writes engine/gemm_tables/
    python -m benchmarks.gemm_tune --presets qwen3-0.6b --rows 1,8 --out /tmp/t.json
    python -m benchmarks.gemm_tune --presets qwen3-4b --rows 1 --update
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from benchmarks.forward_kernels import time_steps
from bubblelab.core.files import write_atomic
from bubblelab.engine import pdl
from bubblelab.engine.config import preset
from bubblelab.engine.linear import table_path
from bubblelab.engine.triton_gemm import TileConfig, skinny_matmul
from bubblelab.runs.machine import git_facts

ROWS = (1, 2, 4, 8, 16, 32, 64, 128)


def projection_shapes(name: str) -> dict[str, tuple[int, int]]:
    """(N, K) of each GEMM of a decode step at tensor parallel 1."""
    c = preset(name)
    q, kv = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
    return {
        "qkv_proj": (q + 2 * kv, c.hidden_size),
        "o_proj": (c.hidden_size, q),
        "gate_up_proj": (2 * c.intermediate_size, c.hidden_size),
        "down_proj": (c.hidden_size, c.intermediate_size),
        "lm_head": (c.vocab_size, c.hidden_size),
    }


def candidates(rows: int, n: int, k: int) -> list[TileConfig]:
    """Launch shapes worth timing for this many rows of an [N, K] weight: the GEMV form for one
    row (K split at most 2 ways: 4 never won), tl.dot tiles otherwise (BLOCK_M the rows rounded
    up to a power of two, 16 to 64, or 128 at 128 rows); K split 2 or 4 ways as well where K is
    the long side (few output tiles)."""
    splits = (1, 2, 4) if k > n else (1,)
    out = []
    if rows == 1:
        for bn, bk, warps, stages, split in itertools.product(
            (4, 8, 16, 32), (256, 512, 1024, 2048), (4, 8), (2, 3, 4), splits[:2]
        ):
            if bn * bk <= 16384:  # the fp32 accumulator stays in registers
                out.append(TileConfig(1, bn, bk, warps, stages, split))
    block_ms = {min(64, max(16, 1 << (rows - 1).bit_length()))} | ({128} if rows >= 128 else set())
    for bm, bn, bk, warps, stages, split in itertools.product(
        sorted(block_ms), (16, 32, 64, 128), (128, 256), (4, 8), (3, 4), splits
    ):
        if stages * (bm + bn) * bk * 2 <= 160 * 1024:  # shared memory of the pipelined tiles
            out.append(TileConfig(bm, bn, bk, warps, stages, split))
    return out


def time_graph(
    fn: Callable[[torch.Tensor, torch.Tensor], object] | None,
    x,
    weights,
    reps: int,
    early: bool = False,
) -> float:
    """Microseconds per call of fn(x, w), over every w in one captured graph, each call after a
    small elementwise kernel on x as in a decoder layer (a GEMM's launch and tail then cost what
    they cost in a step, not overlap with the same GEMM's); fn None: that kernel alone.
    early: that kernel is the engine's RMSNorm and kernels start early as the engine's do (PDL)."""
    scale = unit_scale(x)  # made outside the capture: a fill would be one more kernel in it

    def body() -> None:
        with pdl.using("own") if early else pdl.using("off"):
            for w in weights:
                y = _normed(x, scale) if early else x.mul_(1.0)
                if fn is not None:
                    fn(y, w)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # compiles and warms up outside the capture
        body()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        body()
    return time_steps(graph.replay, reps, cuda=True) * 1e3 / len(weights)


def tune_shape(n: int, k: int, rows: list[int], args, log) -> dict[str, dict]:
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    nbytes = n * k * 2
    gen = torch.Generator(device="cuda").manual_seed(0)
    weights = [
        (torch.randn(n, k, device="cuda", generator=gen) * k**-0.5).to(torch.bfloat16)
        for _ in range(max(1, math.ceil(4 * l2 / nbytes)))
    ]
    result = {}
    for m in rows:
        x = torch.randn(m, k, device="cuda", generator=gen).to(torch.bfloat16)
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        early = launched_early(args.pdl, m)
        # rows of unit RMS: the PDL timing's RMSNorm (unit weights) leaves them nearly as they are
        x = x * torch.rsqrt(x.float().pow(2).mean(1, keepdim=True)).to(x.dtype)
        timed = functools.partial(time_graph, x=x, weights=weights, reps=args.reps, early=early)
        reference = x.float() @ weights[0].float().t()
        # what `out` holds after a config's replays: the product of what the graph's GEMMs read
        fed = _normed(x, unit_scale(x)) if early else x
        last = fed.float() @ weights[-1].float().t()
        between_us = timed(None)  # the elementwise kernel alone
        cublas_us = timed(functools.partial(_cublas, out=out)) - between_us
        best: tuple[float, TileConfig] | None = None
        for config in candidates(m, n, k):
            try:
                y = skinny_matmul(x, weights[0], config).float()
            except Exception as exc:  # noqa: BLE001 -- a config this GPU cannot run is skipped
                log(f"  skip {config}: {type(exc).__name__}")
                continue
            # bf16 output rounding is half a step (2^-8 of the largest value); allow two steps
            error = (y - reference).abs().max().item()
            if error > 8e-3 * reference.abs().max().item():
                log(f"  WRONG {config}: max error {error:.3g}")
                continue
            us = timed(functools.partial(skinny_matmul, config=config, out=out)) - between_us
            # after many replays `out` holds the last copy's product: split-K's hand-over held
            error = (out.float() - last).abs().max().item()
            if error > 8e-3 * last.abs().max().item():
                log(f"  WRONG after replays {config}: max error {error:.3g}")
                continue
            if best is None or us < best[0]:
                best = (us, config)
        entry: dict = {"cublas_us": round(cublas_us, 2), "config": None}
        if best is not None:
            entry["triton_us"] = round(best[0], 2)
            entry["best_triton"] = best[1].as_dict()
            if best[0] < cublas_us * (1 - args.margin):
                entry["config"] = best[1].as_dict()
        fastest = min(cublas_us, best[0] if best else cublas_us)
        entry["gbs"] = round(nbytes / fastest / 1e3, 1)
        picked = "triton" if entry["config"] else "cublas"
        triton_us = f"{best[0]:.1f}" if best else "-"
        log(f"{n}x{k} rows {m}: cuBLAS {cublas_us:.1f} us, Triton {triton_us} us -> {picked}")
        entry["pdl"] = early
        result[str(m)] = entry
    return result


def launched_early(choice: str, rows: int) -> bool:
    """Whether a GEMM of this many rows is timed with PDL: as the engine launches it (auto), or
    as --pdl on|off forces."""
    if choice != "auto":
        return choice == "on"
    with pdl.step_rows(rows):  # BUBBLELAB_PDL, pdl.MAX_ROWS and the GPU decide, as in the engine
        return pdl.enabled(torch.device("cuda"))


def unit_scale(x: torch.Tensor) -> torch.Tensor:
    return torch.ones(x.shape[1], dtype=x.dtype, device=x.device)


def _normed(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x through the PDL timing's RMSNorm (the engine's kernel, unit weights). The after-replay
    check compares with this, not with x: the norm's rounding moved the qwen3-4b LM head's
    products just past the check's tolerance. PDL changes when it runs, never its bits."""
    from bubblelab.engine.models.triton_fused import rms_norm  # Triton: only on a GPU

    y = rms_norm(x, scale, 1e-6)
    assert isinstance(y, torch.Tensor)  # no residual: one tensor
    return y


def _cublas(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    pdl.foreign_kernel()  # as linear.py: the kernel after it starts late
    return torch.mm(x, w.t(), out=out)


def base_table(update: Path | bool | None, out: Path, default: Path, facts: dict) -> dict:
    """A new table of these facts, or (update) the table to amend, its own facts kept and this
    run's appended under "updates"."""
    if update is None:
        return {**facts, "shapes": {}, "used_by": {}}
    path = update if isinstance(update, Path) else (out if out.exists() else default)
    if not path.exists():
        sys.exit(f"--update: no table at {path} to start from")
    table = json.loads(path.read_text())
    if table.get("device") != facts["device"]:
        sys.exit(f"--update: {path} was tuned on {table.get('device')}, this is {facts['device']}")
    table.setdefault("updates", []).append(facts)
    return table


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--presets", default="qwen3-4b,qwen3-8b")
    ap.add_argument("--rows", default=",".join(map(str, ROWS)))
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--margin", type=float, default=0.03, help="required win over cuBLAS")
    ap.add_argument("--out", type=Path, default=None, help="default: this GPU's table")
    ap.add_argument(
        "--pdl",
        choices=("auto", "on", "off"),
        default="auto",
        help="time with PDL: where the engine launches with it (auto), always, never",
    )
    ap.add_argument(
        "--update",
        type=Path,
        nargs="?",
        const=True,
        default=None,
        help="start from this table (bare: the one at --out, else this GPU's) and replace only "
        "the shapes and rows tuned now",
    )
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("gemm_tune needs a CUDA GPU")
    rows = [int(r) for r in args.rows.split(",")]
    device = torch.cuda.get_device_name(0)
    out = args.out or table_path(device)
    shapes: dict[tuple[int, int], list[str]] = {}
    for name in args.presets.split(","):
        for proj, shape in projection_shapes(name).items():
            shapes.setdefault(shape, []).append(f"{name}.{proj}")
    t0 = time.perf_counter()
    facts = {
        "device": device,
        "torch": torch.__version__,
        "triton": __import__("triton").__version__,
        "commit": git_facts()["git_revision"],
        "command": "python -m benchmarks.gemm_tune " + " ".join(sys.argv[1:]),
        "margin": args.margin,
        "pdl": args.pdl,
    }
    table = base_table(args.update, out, table_path(device), facts)
    out.parent.mkdir(parents=True, exist_ok=True)
    for (n, k), users in shapes.items():
        tuned = tune_shape(n, k, rows, args, lambda s: print(s, flush=True))
        key = f"{n}x{k}"
        table["shapes"].setdefault(key, {}).update(tuned)
        table["used_by"][key] = sorted(set(table["used_by"].get(key, [])) | set(users))
        table["wall_s"] = round(time.perf_counter() - t0, 1)
        write_atomic(out, json.dumps(table, indent=1) + "\n")  # after each shape: nothing lost
        torch.cuda.empty_cache()
    print(f"wrote {out} in {table['wall_s']} s")


if __name__ == "__main__":
    main()
