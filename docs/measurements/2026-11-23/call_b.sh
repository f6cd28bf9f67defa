#!/usr/bin/env bash
# GPU call B (H200): step timing, two instruments. qwen3-0.6b at 1/8/32/128 streams, depth 1 and 2, under nsys
# (the in-process timeline records the same runs), compared step by step; then the same sweep unprofiled
# (twice, interleaved), for the depth-2 vs depth-1 forward with GPU clocks. Writes under $OUT.
set -u
python3 -m bubblelab run-and-profile --model qwen3-0.6b --device cuda --streams 1,8,32,128 \
  --requests-per-stream 2 --out /tmp/sweep 2>&1 | grep -E "tokens/s|rror|report" | head -12
python3 -m benchmarks.compare_nsys_timeline /tmp/sweep --out "$OUT/nsys-vs-timeline.json"
python3 -m bubblelab run-and-profile --model qwen3-0.6b --device cuda --streams 1,8,32,128 --no-nsys \
  --repeats 2 --requests-per-stream 2 --out /tmp/plain 2>&1 | grep -E "tokens/s|rror" | head -20
python3 - /tmp/plain <<'PY'
import json, pathlib, sys, statistics as st
rows = {}
for p in sorted(pathlib.Path(sys.argv[1], "runs").glob("*-r?.json")):
    s = json.loads(p.read_text())["summary"]
    rows.setdefault((s["streams"], s["depth"]), []).append(s)
for (streams, depth), ss in sorted(rows.items()):
    print(streams, depth, "step", [round(s["step_ms_median"], 4) for s in ss],
          "sm MHz", [s.get("sm_clock_mhz_median") for s in ss], "W", [round(s.get("power_w_median") or 0) for s in ss],
          "anchor us", [round(s.get("clock_anchor_us_max") or 0, 1) for s in ss])
PY
cp /tmp/plain/results.json "$OUT/plain-results.json"; cp /tmp/sweep/results.json "$OUT/nsys-results.json"
tar czf "$OUT/sweep-runs.tgz" -C /tmp/sweep runs; du -sh /tmp/sweep/traces; ls -la "$OUT"
