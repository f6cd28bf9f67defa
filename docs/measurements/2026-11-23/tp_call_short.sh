#!/usr/bin/env bash
# The TP call as run (nvidia-h200-x2), trimmed from tp_call.sh to fit the session's last ~10 minutes of
# device time: smoke tests, then the sweep with one repeat (qwen3-32b first). Failure tests and the nsys
# check of both ranks did not run. Writes tp-gpu-tests.xml and tp-sweep.json under $OUT.
set -u
start=$(date +%s)
left() { local s=$(( $1 - ($(date +%s) - start) )); echo $(( s > 1 ? s : 1 )); }
python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.device_count(), "GPUs")'
env | grep -E "NCCL_NVLS_ENABLE|TORCH_SYMM_MEM_DISABLE_MULTICAST|NVSHMEM_DISABLE_NVLS"
timeout "$(left 150)" python3 -m pytest -q -s -m gpu -p no:cacheprovider \
  tests/test_tensor_parallel_gpu.py -k "not dies_or_hangs" --junitxml="$OUT/tp-gpu-tests.xml" \
  2>&1 | grep -v -i warn | tail -12
echo "== smoke done at $(( $(date +%s) - start )) s"
timeout "$(left 430)" python3 -m benchmarks.tp_sweep --presets qwen3-32b,qwen3-8b \
  --streams 1,8,32,128 --repeats 1 --L 64 --deadline-s "$(left 400)" --preset-min-s 90 \
  --out "$OUT/tp-sweep.json" 2>&1 | grep -v -i warn | tail -40
echo "== call done at $(( $(date +%s) - start )) s"
