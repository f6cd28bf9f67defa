#!/usr/bin/env bash
# A record: the GPU-machine commands of session 2 (2026-11-21), in the order run; the figures are in
# docs/measurements.md. Run from the repo root after `source .device/remote-setup.sh`, with the flash-attn-4
# parts staged (tools/gpu_machine/README.md); writes under $OUT. Step 1 of 2: tests, micro-benchmarks, the
# nsys-vs-timeline sweep and its traces, the FA4 smoke test. Step 2 is benchmarks.compare_engines (see
# docs/measurements.md section 4).
# The commands are as they ran, with the paths of the time. Today: `python -m benchmarks.<name>` for
# benchmarks/<name>.py; make_traces is tools/docs/make_traces.py, unstage_flash_attn.sh and fa4_smoke.py are
# in tools/gpu_machine/.
set -u
python -m pytest -q -m gpu tests/test_sampling_graphs.py tests/test_prefill_varlen.py tests/test_triton_decode.py \
  tests/test_compile.py tests/test_model_parity.py tests/test_sampler.py 2>&1 | grep -v -i warn | tail -8
timeout 100 python benchmarks/prefill_bench.py --out "$OUT/prefill_bench.json" 2>&1 | tail -24
timeout 100 python benchmarks/forward_kernels.py --presets qwen3-4b --batches 1,32 --attention-backend triton \
  --out "$OUT/forward_kernels.json" > /dev/null 2>&1; echo "forward_kernels rc=$?"
python -m bubblelab run-and-profile --model qwen3-0.6b --device cuda --streams 1,32 --requests-per-stream 2 \
  --out /tmp/sweep 2>&1 | grep -E "tokens/s|report|rror"
python benchmarks/compare_nsys_timeline.py /tmp/sweep > "$OUT/nsys-vs-timeline.json"
python - "$OUT/nsys-vs-timeline.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1])):
    print(r["streams"], r["depth"], "  ".join(f"{k}: {v['nsys']:.4f} vs {v['timeline']:.4f} ({100 * (v['rel_diff'] or 0):+.1f}%)"
                                            for k, v in r.items() if isinstance(v, dict)))
PY
python benchmarks/make_traces.py /tmp/sweep /tmp/traces --steps 150 && tar cf "$OUT/traces.tar" -C /tmp traces
cp /tmp/sweep/results.json "$OUT/sweep-results.json"
bash benchmarks/unstage_flash_attn.sh && source /tmp/fa4site/env.sh && \
  timeout 200 python benchmarks/fa4_smoke.py --budget-s 140 --skip-nanovllm --out "$OUT/smoke" 2>&1 | tail -30
tar cf "$OUT/smoke.tar" -C "$OUT" smoke && rm -rf "$OUT/smoke"
