#!/usr/bin/env bash
# GPU call A (H200): the GPU test suite as JUnit XML, the prefill benchmark, decode kernels against the floor.
# Run from the checkout root after `source tools/gpu_machine/setup.sh`; writes under $OUT.
set -u
git_rev=$(cat .git-rev 2>/dev/null || echo unknown)
timeout 240 python3 -m pytest -q -m gpu -p no:cacheprovider --junitxml="$OUT/gpu-tests.xml" \
  -o junit_suite_name="gpu $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) $git_rev $(date -u +%FT%TZ)" \
  2>&1 | grep -v -i "warn" | tail -15
timeout 200 python3 -m benchmarks.prefill_bench --presets qwen3-4b --repeats 5 --out "$OUT/prefill-bench.json" \
  2>&1 | grep -v "^ " | tail -5
python3 - "$OUT/prefill-bench.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
print(f"{'variant':<13}{'tokens':>7}{'rows':>5}{'host ms':>9}{'gpu ms':>9}{'busy%':>7}")
for r in rows:
    print(f"{r['variant']:<13}{r['tokens']:>7}{r['rows']:>5}{r['host_ms']:>9.3f}{r['gpu_ms']:>9.3f}{r['busy_pct']:>7.1f}")
PY
timeout 150 python3 benchmarks/forward_kernels.py --presets qwen3-4b,qwen3-8b --batches 1,128 \
  --attention-backend triton --out "$OUT/forward-kernels.json" > "$OUT/forward-kernels.log" 2>&1
echo "forward_kernels rc=$?"; grep -o '"batch_[0-9]*": {"step_ms": [0-9.]*' "$OUT/forward-kernels.log" | head
