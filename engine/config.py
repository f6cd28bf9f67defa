"""Model shapes (ModelConfig), named presets with published shapes, and engine options
(EngineConfig)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch

from ..core.checks import check_float, check_int
from ..core.errors import BubblelabError, OptionError
from ..core.pipeline import check_depth
from ..core.scheduler import Limits

# Batch rows: each costs two logits rows of the vocabulary (1.2 GB at 1024 rows of Qwen3's 152k).
MAX_NUM_SEQS = 1024
MAX_MODEL_LEN = 1 << 20
# Prefill graphs past 512 tokens come every this many tokens (cuda_graphs.prefill_buckets).
PREFILL_BUCKET_STEP = 512
ATTENTION_BACKENDS = ("auto", "torch", "flash-attn", "triton")

DTYPES: dict[str, torch.dtype] = {
    "fp32": torch.float32,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
}


@dataclass(frozen=True)
class ModelConfig:
    """Shape of a decoder-only Llama / Qwen3 model (the fields both families share)."""

    architecture: Literal["llama", "qwen3"]
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float = 10000.0
    rope_scaling: dict | None = None  # HF-style, e.g. {"rope_type": "llama3", "factor": 32.0, ...}
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = True
    max_position_embeddings: int = 4096
    eos_token_ids: tuple[int, ...] = ()
    bos_token_id: int | None = None

    @property
    def qk_norm(self) -> bool:
        return self.architecture == "qwen3"


def _llama32_scaling() -> dict:
    return {
        "rope_type": "llama3",
        "factor": 32.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }


# Published shapes (Hugging Face config.json of each model); weights are seeded random.
PRESETS: dict[str, ModelConfig] = {
    "smollm2-135m": ModelConfig(
        "llama",
        49152,
        576,
        1536,
        30,
        9,
        3,
        64,
        rope_theta=100000.0,
        rms_norm_eps=1e-5,
        max_position_embeddings=8192,
        eos_token_ids=(2,),
        bos_token_id=1,
    ),
    "qwen3-0.6b": ModelConfig(
        "qwen3",
        151936,
        1024,
        3072,
        28,
        16,
        8,
        128,
        rope_theta=1e6,
        max_position_embeddings=40960,
        eos_token_ids=(151645, 151643),
    ),
    "qwen3-1.7b": ModelConfig(
        "qwen3",
        151936,
        2048,
        6144,
        28,
        16,
        8,
        128,
        rope_theta=1e6,
        max_position_embeddings=40960,
        eos_token_ids=(151645, 151643),
    ),
    "qwen3-4b": ModelConfig(
        "qwen3",
        151936,
        2560,
        9728,
        36,
        32,
        8,
        128,
        rope_theta=1e6,
        max_position_embeddings=40960,
        eos_token_ids=(151645, 151643),
    ),
    "qwen3-8b": ModelConfig(
        "qwen3",
        151936,
        4096,
        12288,
        36,
        32,
        8,
        128,
        rope_theta=1e6,
        tie_word_embeddings=False,
        max_position_embeddings=40960,
        eos_token_ids=(151645, 151643),
    ),
    "qwen3-32b": ModelConfig(
        "qwen3",
        151936,
        5120,
        25600,
        64,
        64,
        8,
        128,
        rope_theta=1e6,
        tie_word_embeddings=False,
        max_position_embeddings=40960,
        eos_token_ids=(151645, 151643),
    ),
    "llama-3.2-1b": ModelConfig(
        "llama",
        128256,
        2048,
        8192,
        16,
        32,
        8,
        64,
        rope_theta=500000.0,
        rope_scaling=_llama32_scaling(),
        rms_norm_eps=1e-5,
        max_position_embeddings=131072,
        eos_token_ids=(128001, 128008, 128009),
        bos_token_id=128000,
    ),
    # Tiny shapes for CPU tests: same code paths, milliseconds per step.
    "tiny-llama": ModelConfig(
        "llama",
        512,
        64,
        128,
        2,
        4,
        2,
        16,
        rope_theta=10000.0,
        rms_norm_eps=1e-5,
        max_position_embeddings=1024,
        eos_token_ids=(2,),
        bos_token_id=1,
    ),
    "tiny-qwen3": ModelConfig(
        "qwen3",
        512,
        64,
        128,
        2,
        4,
        2,
        16,
        rope_theta=1e6,
        max_position_embeddings=1024,
        eos_token_ids=(2,),
    ),
}


def preset(name: str) -> ModelConfig:
    if name not in PRESETS:
        raise BubblelabError(f"unknown preset {name!r}; known presets: {', '.join(PRESETS)}")
    return PRESETS[name]


def check_model(spec: str | None) -> None:
    """The loader's rule for a model spec (engine.loader), checked before anything loads or runs:
    None (the embedded model), an existing file or folder, or a preset."""
    if spec is None or spec in PRESETS or Path(spec).expanduser().exists():
        return
    if "/" in spec or spec.endswith(".gguf"):
        raise BubblelabError(f"model path {spec} does not exist")
    raise BubblelabError(
        f"model {spec!r} is neither an existing path nor a known preset "
        f"(presets: {', '.join(PRESETS)})"
    )


def default_dtype(device: str) -> str:
    """The dtype when none is named: bf16 on CUDA, fp32 on the CPU (whose bf16 matmuls are slow)."""
    return "bf16" if str(device).startswith("cuda") else "fp32"


def parse_dtype(name: str | torch.dtype) -> torch.dtype:
    if isinstance(name, torch.dtype):
        return name
    if name not in DTYPES:
        raise OptionError("dtype", f"must be one of {', '.join(DTYPES)}", name)
    return DTYPES[name]


@dataclass
class EngineConfig:
    """Everything the engine needs besides the model. Defaults suit the CPU demo."""

    model: str | None = None  # spec string: preset name, HF dir, GGUF path; None = embedded default
    device: str = "cpu"
    dtype: str | None = None  # fp32 | bf16 | fp16; None: default_dtype(device)
    depth: int = 2  # pipeline depth: 1 = blocking, 2 = pipelined
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 8192
    max_model_len: int = 2048
    block_size: int = 16  # tokens per KV page
    kv_cache_bytes: int = 256 << 20  # CPU pool budget
    gpu_memory_utilization: float = 0.85
    num_kv_blocks: int | None = None  # explicit pool size (tests use it to force preemption)
    attention_backend: str = "auto"  # auto | torch | flash-attn | triton
    enforce_eager: bool = False  # True: no CUDA graphs
    # torch.compile the fused elementwise ops; None: on for CUDA, off for CPU.
    compile: bool | None = None
    seed: int = 0  # weights of random presets
    # Processes, one per GPU (rank r on cuda:r; on the CPU, processes too). 1: this process only.
    tensor_parallel: int = 1
    # A worker that has not taken a step's inputs, or a step not finished, after this long is hung.
    tensor_parallel_timeout_s: float = 15.0
    debug: bool = False  # check pipeline invariant I4 in full on every transition (tests)

    def __post_init__(self) -> None:
        check_depth(self.depth)
        check_device(self.device)
        if self.model is not None and (not isinstance(self.model, str) or not self.model.strip()):
            # '' would load the working directory as a checkpoint
            raise OptionError(
                "model", "must name a preset, a checkpoint dir or a GGUF file", self.model
            )
        if self.tensor_parallel < 1:
            raise OptionError("tensor_parallel", "must be >= 1", self.tensor_parallel)
        if self.dtype is None:
            self.dtype = default_dtype(self.device)
        parse_dtype(self.dtype)
        check_int("max_num_seqs", self.max_num_seqs, 1, MAX_NUM_SEQS)
        check_int("max_model_len", self.max_model_len, 2, MAX_MODEL_LEN)
        check_int("max_num_batched_tokens", self.max_num_batched_tokens, 1, MAX_MODEL_LEN)
        check_int("block_size", self.block_size, 1, 1024)
        check_int("kv_cache_bytes", self.kv_cache_bytes, 1)
        check_float("gpu_memory_utilization", self.gpu_memory_utilization, 0.0, 1.0, lo_open=True)
        if self.num_kv_blocks is not None:
            check_int("num_kv_blocks", self.num_kv_blocks, 1)
        check_int("seed", self.seed, 0, 2**63 - 1)
        if self.attention_backend not in ATTENTION_BACKENDS:
            raise OptionError(
                "attention_backend",
                f"must be one of {', '.join(ATTENTION_BACKENDS)}",
                self.attention_backend,
            )

    @property
    def limits(self) -> Limits:
        """The options that shape the schedule, as the scheduler (and the cost model's replay of
        it) reads them."""
        return Limits(self.max_num_seqs, self.max_num_batched_tokens, self.max_model_len)


def check_device(device: str) -> str:
    """cpu, cuda or cuda:N, and CUDA only where there is a GPU (else torch fails deep loading)."""
    if not isinstance(device, str) or not re.fullmatch(r"cpu|cuda(:\d+)?", device):
        raise OptionError("device", "must be cpu, cuda or cuda:N", device)
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise OptionError("device", "must be cpu on this machine (no CUDA GPU found)", device)
    return device
