#!/usr/bin/env bash
# GPU call C (H200): the prefill benchmark (qwen3-4b, graph vs eager), then call B (step timing).
set -u
timeout 240 python3 -m benchmarks.prefill_bench --presets qwen3-4b --repeats 5 --out "$OUT/prefill-bench.json" \
  2>&1 | grep -v "^ " | tail -5
python3 - "$OUT/prefill-bench.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
print(f"{'variant':<13}{'tokens':>7}{'rows':>5}{'host ms':>9}{'gpu ms':>9}{'busy%':>7}")
for r in rows:
    print(f"{r['variant']:<13}{r['tokens']:>7}{r['rows']:>5}{r['host_ms']:>9.3f}{r['gpu_ms']:>9.3f}{r['busy_pct']:>7.1f}")
PY
bash docs/measurements/2026-11-23/call_b.sh
