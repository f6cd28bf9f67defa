#!/usr/bin/env bash
# GPU call (H200), issue #16, HELD-OUT set (docs/costmodel-heldout.md: chosen before any of these ran, and
# the model frozen at the commit recorded there). ~7.5 minutes, bounded at 8.5. Unprofiled only (--no-nsys):
# accuracy is reported on the runs the model is fed; 5 repeats, depth 1 and 2 paired on the same requests.
#   source tools/gpu_machine/setup.sh && bash docs/measurements/2026-11-23/costmodel_heldout.sh
# Writes under $OUT (<= 8 files): held-out-<name>.results.json.gz per configuration group, heldout.log.
set -u
LOG="$OUT/heldout.log"
exec > >(tee -a "$LOG") 2>&1
echo "git $(cat .git-rev 2>/dev/null || git rev-parse HEAD 2>/dev/null || echo unknown)  $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv,noheader

sweep() {  # name, timeout, run-and-profile arguments...
  local name=$1 limit=$2; shift 2
  local dir=/tmp/$name start=$(date +%s)
  rm -rf "$dir"
  timeout "$limit" python3 -m bubblelab run-and-profile --device cuda --no-nsys --out "$dir" "$@" 2>&1 \
    | grep -v -E "^\s*$|Warning|warn" | tail -24
  echo "$name: rc=${PIPESTATUS[0]} wall $(( $(date +%s) - start )) s"
  if [ ! -f "$dir/results.json" ] && [ -d "$dir/runs" ]; then  # cut short: keep the runs that finished
    python3 -c "from pathlib import Path; from bubblelab.runs.sweep import assemble; \
assemble(Path('$dir'), strict=False)"
  fi
  [ -f "$dir/results.json" ] && gzip -c "$dir/results.json" > "$OUT/$name.results.json.gz"
}

# H1: a larger model at a middling stream count
sweep held-out-qwen3-8b 110 --model qwen3-8b --streams 16
# H2, H3: short outputs (L ~ 30) with longer prompts (512 tokens), many and few streams
sweep held-out-qwen3-1.7b-short 120 --model qwen3-1.7b --streams 2,64 --output-len-mean 30 \
  --prompt-len 512 --max-model-len 1024
# H4, H5: every request constrained (detect); the grammar decides the length (~35): 12 requests a stream
sweep held-out-qwen3-0.6b-detect 75 --model qwen3-0.6b --streams 8,32 --constraint detect \
  --requests-per-stream 12
# H6: long outputs (L ~ 400) at 64 streams
sweep held-out-qwen3-4b-long 110 --model qwen3-4b --streams 64 --output-len-mean 400 --max-model-len 1024
# H7, H8: a Llama, another prompt length, few and many streams
sweep held-out-llama-3.2-1b 70 --model llama-3.2-1b --streams 4,32 --prompt-len 128
ls -la "$OUT"
