#!/usr/bin/env bash
# Issue #16 item 5 on the GPU: qwen3-4b at 1, 8, 32 streams, depths 1 and 2, with nsys, timed as a
# user runs it, with every part of each pass recorded (provenance.timings; runs/nsys/nsys.log).
# Run from the checkout root after `source tools/gpu_machine/setup.sh` (one H200; ~7 minutes):
#   bash tools/gpu_machine/sweep_time.sh
# 1. The default command (5 unprofiled repeats + one under nsys). 2. The same with --repeats 1 (one
# run per configuration and depth, as the item counts it). Writes under $OUT: sweep-time.log,
# <name>.results.json.gz, <name>.nsys.log, <name>.timings.json and <name>.sizes.txt per sweep; sweep-time.log ends with each sweep's
# breakdown (python -m tools.docs.sweep_time). Copy them to docs/measurements/<date>/sweep-time/.
set -u
OUT=${OUT:-/tmp/sweep-time-out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/sweep-time.log") 2>&1
echo "git $(bash tools/gpu_machine/stamp_rev.sh label)  $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv,noheader
nsys --version
# Bytecode for the packages a sweep imports, as pip leaves an install (setup.sh: this machine's torch
# has none); timed, not part of the sweep.
start=$(date +%s.%N)
for pkg in torch triton transformers tokenizers; do
  python3 -c "import importlib.util as u; print(u.find_spec('$pkg').submodule_search_locations[0])"
done | xargs python3 -m compileall -q -j 0 /tmp/site "$(pwd)" > /dev/null 2>&1
echo "bytecode compiled in $(python3 -c "import time; print(f'{time.time() - $start:.1f}')") s"

sweep() {  # name, time limit (s), run-and-profile arguments...
  local name=$1 limit=$2; shift 2
  local dir=/tmp/$name start
  rm -rf "$dir"
  start=$(date +%s.%N)
  timeout "$limit" python3 -m bubblelab run-and-profile --device cuda --model qwen3-4b \
    --streams 1,8,32 --out "$dir" "$@" 2>&1 | grep -v -E "^\s*$|Warning|warn" | tail -30
  echo "$name: rc=${PIPESTATUS[0]} wall $(python3 -c "import time; print(f'{time.time() - $start:.1f}')") s"
  [ -f "$dir/results.json.gz" ] && cp "$dir/results.json.gz" "$OUT/$name.results.json.gz"
  [ -f "$dir/runs/nsys/nsys.log" ] && cp "$dir/runs/nsys/nsys.log" "$OUT/$name.nsys.log"
  # the parts recorded after the assembly (before the runs, the report) and every part's bytes
  [ -f "$dir/runs/timings.json" ] && cp "$dir/runs/timings.json" "$OUT/$name.timings.json"
  [ -d "$dir" ] && du -sb "$dir" "$dir"/* "$dir"/traces/* 2>/dev/null > "$OUT/$name.sizes.txt"
}

# SWEEPS="default" runs only the first (a call with less device time left)
case " ${SWEEPS:-default repeats1} " in *" default "*) sweep sweep-time-default "${DEFAULT_LIMIT_S:-260}" ;; esac
case " ${SWEEPS:-default repeats1} " in *" repeats1 "*) sweep sweep-time-repeats1 170 --repeats 1 ;; esac
for f in "$OUT"/*.results.json.gz; do
  [ -f "$f" ] && python3 -m tools.docs.sweep_time "$f"
done
ls -la "$OUT"
