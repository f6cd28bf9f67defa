#!/usr/bin/env bash
# GPU call TP (nvidia-h200-x2), issue #18: tensor parallelism on the H200 pair. From the checkout root:
#   source tools/gpu_machine/setup.sh && bash docs/measurements/2026-11-23/tp_call.sh
# Writes 5 files under $OUT. Estimate: ~9 of the call's 10 minutes (each step's estimate below);
# every step has a timeout from the time left, in order of importance, so a slow step costs the later
# ones, never the call. NVLink multicast stays off (setup.sh exports it; the engine sets it again).
set -u
start=$(date +%s)
left() {  # seconds until second $1 of the call, at least 1 (timeout 0 would mean no limit)
  local s=$(( $1 - ($(date +%s) - start) )); echo $(( s > 1 ? s : 1 ))
}
python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.device_count(), "GPUs")'
nvidia-smi topo -m 2>&1 | head -3
env | grep -E "NCCL_NVLS_ENABLE|TORCH_SYMM_MEM_DISABLE_MULTICAST|NVSHMEM_DISABLE_NVLS"

# 1. Smoke, ~100 s (4 engines of qwen3-0.6b, 2 of them over both GPUs): fp32 TP 2 == TP 1 token
#    for token with the all-reduces inside CUDA graphs, depth 1 == depth 2 at TP 2, every rank idle
#    after, per-rank timelines; bf16 logits within tolerance.
timeout "$(left 200)" python3 -m pytest -q -s -m gpu -p no:cacheprovider \
  tests/test_tensor_parallel_gpu.py -k "not dies_or_hangs" --junitxml="$OUT/tp-gpu-tests.xml" \
  2>&1 | grep -v -i warn | tail -12
echo "== smoke done at $(( $(date +%s) - start )) s"

# 2. The sweep, ~370 s: qwen3-32b then qwen3-8b (bf16, seeded random weights, compiled fused ops,
#    Triton attention, CUDA graphs), 1/8/32/128 streams, depth 1 and 2, TP 1 and 2 (both engines
#    alive, interleaved), 2 repeats, L = 64 (16 runs a repeat, ~2 s each at 32B). Engines: ~150 s
#    for the 32B pair (compile, capture; its weights drawn on the GPUs), ~100 s for the 8B pair; runs
#    ~45 s (32B) and ~20 s (8B) a repeat. No run starts after second 470 of the call; a preset starts
#    only with 100 s left (the 8B then may get one repeat).
timeout "$(left 530)" python3 -m benchmarks.tp_sweep --presets qwen3-32b,qwen3-8b \
  --streams 1,8,32,128 --repeats 2 --L 64 --deadline-s "$(left 470)" --preset-min-s 100 \
  --out "$OUT/tp-sweep.json" 2>&1 | grep -v -i warn | tail -45
echo "== sweep done at $(( $(date +%s) - start )) s"

# 3. Failures on the GPU, ~70 s (6 engines): a worker killed (SIGKILL) or hung (SIGSTOP) mid-run ends the run
#    with a WorkerError within seconds, no process is left, and GPU 0 serves a new engine after the
#    aborted NCCL work. Last but one: if aborting NCCL leaves GPU 0 stuck, only this step hangs.
timeout "$(left 578)" python3 -m pytest -q -s -m gpu -p no:cacheprovider \
  tests/test_tensor_parallel_gpu.py -k "dies_or_hangs" --junitxml="$OUT/tp-gpu-failures.xml" \
  2>&1 | grep -v -i warn | tail -8
echo "== failure tests done at $(( $(date +%s) - start )) s"

# 4. nsys over a TP-2 sweep, ~150 s, only if time is left: run-and-profile's own sweep at TP 2 (qwen3-0.6b,
#    8 streams, depth 1 and 2, one repeat unprofiled and one under nsys): kernels of both GPUs and NVTX ranges
#    of both processes in each report (spawned workers are followed by default), each process a ranked run
#    of the catalog, the per-rank analysis (straggler, skew, NCCL apart from compute) and the prediction.
#    tp_costmodel_call.sh runs it with time to spare.
if [ "$(left 585)" -gt 120 ]; then
  timeout "$(left 595)" python3 -m benchmarks.tp_nsys_check --model qwen3-0.6b --tp 2 --streams 8 \
    --repeats 1 --out "$OUT/tp-nsys-check.json" 2>&1 | grep -v -i warn | tail -20
fi
ls "$OUT"; echo "== call done at $(( $(date +%s) - start )) s"
