#!/usr/bin/env bash
# GPU call TP-model (nvidia-h200-x2), issue #18 items 2 and 3: the per-rank analysis and the cost model at
# TP 1 and TP 2 on the H200 pair. From the checkout root:
#   source tools/gpu_machine/setup.sh && bash docs/measurements/2026-11-23/tp_costmodel_call.sh
# ~8 of the call's 10 minutes, bounded at 9.5 (each step's timeout from the time left, most important first):
#   1. qwen3-8b at TP 2 then TP 1, run-and-profile unprofiled (bf16, 1 and 32 streams, depth 1 and 2,
#      3 repeats, L = 64; every rank's in-process timeline), ~110 s each;
#   2. bubblelab analyze on the TP-2 directory (a table per rank: straggler, skew, each rank's bubble) and
#      bubblelab predict on both (what pipelining buys at TP 1 vs 2, predicted from the pieces, observed
#      over repeat pairs), ~30 s;
#   3. the nsys check of a TP-2 sweep (qwen3-0.6b, 8 streams; every rank's process and GPU in each report,
#      NCCL kernels apart from compute per rank), ~150 s, only if time is left.
# NVLink multicast stays off (setup.sh exports it; the engine sets it again for every process it starts).
# Writes under $OUT: tp{1,2}.results.json.gz, analyze-tp2.json, predict.json, predict.txt, report-tp2.html,
# tp-nsys-check.json (+ its -results.json.gz), tp-model.log.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
start=$(date +%s)
left() {  # seconds until second $1 of the call, at least 1 (timeout 0 would mean no limit)
  local s=$(( $1 - ($(date +%s) - start) )); echo $(( s > 1 ? s : 1 ))
}
LOG="$OUT/tp-model.log"
exec > >(tee -a "$LOG") 2>&1
echo "git $(cat .git-rev 2>/dev/null || git rev-parse HEAD 2>/dev/null || echo unknown)  $(date -u +%FT%TZ)"
env | grep -E "NCCL_NVLS_ENABLE|TORCH_SYMM_MEM_DISABLE_MULTICAST|NVSHMEM_DISABLE_NVLS"

sweep() {  # name, second of the call to stop by, run-and-profile arguments...
  local name=$1 by=$2; shift 2
  local dir=/tmp/$name t0=$(date +%s)
  rm -rf "$dir"
  timeout "$(left "$by")" python3 -m bubblelab run-and-profile --device cuda --no-nsys --out "$dir" "$@" \
    2>&1 | grep -v -E "^\s*$|Warning|warn" | tail -16
  echo "$name: rc=${PIPESTATUS[0]} wall $(( $(date +%s) - t0 )) s"
  if [ ! -f "$dir/results.json" ] && [ -d "$dir/runs" ]; then  # cut short: keep the runs that finished
    python3 -c "from pathlib import Path; from bubblelab.runs.assemble import assemble; \
assemble(Path('$dir'), strict=False)"
  fi
  [ -f "$dir/results.json" ] && gzip -c "$dir/results.json" > "$OUT/$name.results.json.gz"
}

# 1. TP 2 first: the per-rank tables are what this call is for.
MODEL="--model qwen3-8b --streams 1,32 --output-len-mean 64 --repeats 3"
sweep tp2 160 $MODEL --tensor-parallel 2
sweep tp1 300 $MODEL
echo "== sweeps done at $(( $(date +%s) - start )) s"

# 2. The per-rank analysis and the model at TP 1 vs 2.
if [ -f /tmp/tp2/results.json ]; then
  timeout "$(left 320)" python3 -m bubblelab analyze /tmp/tp2 --json "$OUT/analyze-tp2.json" 2>&1 | tail -60
  timeout "$(left 330)" python3 -m bubblelab report /tmp/tp2 2>&1 | tail -2
  [ -f /tmp/tp2/report.html ] && cp /tmp/tp2/report.html "$OUT/report-tp2.html"
fi
dirs=$(for d in /tmp/tp1 /tmp/tp2; do [ -f "$d/results.json" ] && echo "$d"; done)
if [ -n "$dirs" ]; then
  timeout "$(left 345)" python3 -m bubblelab predict $dirs --json "$OUT/predict.json" > "$OUT/predict.txt" 2>&1
  cat "$OUT/predict.txt"
fi
echo "== analysis done at $(( $(date +%s) - start )) s"

# 3. nsys over a TP-2 sweep, if time is left (~150 s: two engines, a report per run exported).
if [ "$(left 560)" -gt 120 ]; then
  timeout "$(left 570)" python3 -m benchmarks.tp_nsys_check --model qwen3-0.6b --tp 2 --streams 8 \
    --repeats 1 --out "$OUT/tp-nsys-check.json" 2>&1 | grep -v -i warn | tail -20
fi
ls -la "$OUT"; echo "== call done at $(( $(date +%s) - start )) s"
