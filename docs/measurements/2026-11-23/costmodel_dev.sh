#!/usr/bin/env bash
# GPU call (H200), issue #16, DEVELOPMENT set (docs/costmodel-heldout.md). ~7 minutes, bounded at 8.5.
#   source tools/gpu_machine/setup.sh && bash docs/measurements/2026-11-23/costmodel_dev.sh
# 1. The quick-sweep target: qwen3-4b at 1, 8, 32 streams, depths 1 and 2, 5 unprofiled repeats and one
#    repeat under nsys (one worker process per pass), timed as a user runs it (target: <= 120 s for the
#    nsys part). 2. qwen3-0.6b at 1, 8, 32, 128 streams, the same. 3. Trimmed traces of the 0.6b nsys runs
#    at 1 and 32 streams, with how much nsys inflated each (traces/index.json). 4. nsys vs timeline.
# Writes under $OUT (<= 8 files): dev-<model>.results.json.gz, dev-<model>.records.tgz (only when a sweep
# was cut short: its runs' records, assembled on the CPU box later), traces.tgz, nsys-vs-timeline.json,
# dev.log.
set -u
LOG="$OUT/dev.log"
exec > >(tee -a "$LOG") 2>&1
echo "git $(cat .git-rev 2>/dev/null || git rev-parse HEAD 2>/dev/null || echo unknown)  $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv,noheader
nsys --version

sweep() {  # name, timeout, run-and-profile arguments...
  local name=$1 limit=$2; shift 2
  local dir=/tmp/$name start=$(date +%s)
  rm -rf "$dir"
  timeout "$limit" python3 -m bubblelab run-and-profile --device cuda --out "$dir" "$@" 2>&1 \
    | grep -v -E "^\s*$|Warning|warn" | tail -40
  echo "$name: rc=${PIPESTATUS[0]} wall $(( $(date +%s) - start )) s"
  if [ -f "$dir/results.json" ]; then
    gzip -c "$dir/results.json" > "$OUT/$name.results.json.gz"
  elif [ -d "$dir/runs" ]; then  # cut short: keep what finished (bubblelab.runs.sweep.assemble)
    python3 -c "from pathlib import Path; from bubblelab.runs.sweep import assemble; \
assemble(Path('$dir'), strict=False)" && gzip -c "$dir/results.json" > "$OUT/$name.results.json.gz"
    tar czf "$OUT/$name.records.tgz" -C "$dir" sweep.json runs
  fi
  python3 - "$dir" <<'PY'
import json, pathlib, sys
d = pathlib.Path(sys.argv[1])
t = d / "runs" / "timings.json"
for name in ("plain", "nsys"):
    w = d / "runs" / name / "worker.json"
    if w.is_file():
        w = json.loads(w.read_text())
        runs = w.get("runs_s", {})
        print(f"{name}: setup {w['setup_s']:.1f} s, {len(runs)} runs {sum(runs.values()):.1f} s,"
              f" worker total {w.get('total_s', float('nan')):.1f} s")
if t.is_file():
    print("pass wall clock:", {k: round(v["wall_s"], 1) for k, v in json.loads(t.read_text()).items()})
PY
}

sweep dev-qwen3-4b 250 --model qwen3-4b --streams 1,8,32
sweep dev-qwen3-0.6b 180 --model qwen3-0.6b --streams 1,8,32,128

if [ -f /tmp/dev-qwen3-0.6b/results.json ]; then
  timeout 30 python3 -m tools.docs.make_traces /tmp/dev-qwen3-0.6b /tmp/traces --steps 150 --streams 1,32 \
    && tar czf "$OUT/traces.tgz" -C /tmp/traces . && ls -la /tmp/traces
fi
if [ -f /tmp/dev-qwen3-4b/results.json ]; then
  timeout 30 python3 -m benchmarks.compare_nsys_timeline /tmp/dev-qwen3-4b --out "$OUT/nsys-vs-timeline.json" \
    | tail -8
fi
ls -la "$OUT"
