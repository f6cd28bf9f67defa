#!/usr/bin/env bash
# Issue #27's runs on the two-GPU machine, in three calls of at most 10 minutes (the machine stays warm
# between them; flash-attn-4 unstaged first, tools/gpu_machine/README.md). From the checkout root:
#   source tools/gpu_machine/setup.sh && bash tools/gpu_machine/tp_study.sh 1 $OUT   # carry .device .peers
#   source tools/gpu_machine/setup.sh && bash tools/gpu_machine/tp_study.sh 2 $OUT   # then 3
# Part 1: nano-vllm and bubblelab at TP 1 and 2, interleaved (qwen3-4b: the write-up's workload and a
# closed loop at 1 and 32 streams); bubblelab at TP 2 under nsys, every rank in one report
# (benchmarks.tp_nsys_check); nano-vllm at TP 2 under nsys, traced whole (tools.traces).
# Part 2: the TP study (benchmarks.tp_sweep: qwen3-8b and qwen3-32b, TP 1 and 2, depth 1 and 2,
# 1/8/32/128 streams, 5 repeats). Part 3: the TP GPU tests and the TP cost model's held-out set
# (benchmarks/heldout_tp.json; resumed where an earlier call left it). Part 4: the held-out set alone,
# with a longer budget a configuration.
# Each step has its own time limit; a step that fails is logged and the next one runs. What comes
# back: OUT/part<N>.tar.xz (JSON, logs) and OUT/traces<N>.tar.xz (nsys exports, when small enough).
set -u
part=$1 out=$2 work=/tmp/tp-study-$1
mkdir -p "$work"
rev=$(bash tools/gpu_machine/stamp_rev.sh label)
{ echo "commit $rev"; date -u +%FT%TZ; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; } \
  > "$work/machine.txt"
step() {  # step NAME SECONDS COMMAND...: timed, logged, never fatal
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout -k 20 "$limit" "$@" > "$work/$name.log" 2>&1
  echo "$name: exit $? after $((SECONDS - t0)) s" | tee -a "$work/steps.txt"
  tar -cJf "$out/part$part.tar.xz" -C "$work" --exclude='*.sqlite' --exclude='traces' --exclude='run-*' --exclude='ft-work' --exclude='*.nsys-rep' . 2>/dev/null
}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
if [ "$part" = 1 ]; then
  source /tmp/fa4site/env.sh || echo "no flash-attn-4: nano-vllm will not run" >> "$work/steps.txt"
  python -c 'import flash_attn.cute' > "$work/fa4-import.log" 2>&1; echo "fa4 import: exit $?" >> "$work/steps.txt"
  step peers 330 python -m benchmarks.compare_nanovllm --tensor-parallel 1,2 --parts a,b \
    --streams 1,32 --L 64 --requests-per-stream 1 --repeats 5 --deadline-s 290 --out "$work/peers"
  step tp-nsys-check 150 python -m benchmarks.tp_nsys_check --model qwen3-0.6b --tp 2 --streams 8 \
    --repeats 2 --dir "$work/run-tp-nsys" --out "$work/tp-nsys-check.json"
  # flash-attn-4 compiles its kernels in both ranks first: 80 s was not enough on two H100s
  step nano-tp2-trace 260 python -m tools.traces.make_foreign_traces --only nano-tp2 \
    --nano-preset qwen3-0.6b --fork-preset qwen3-0.6b --budget-s 250 --work "$work/ft-work" \
    --out "$work/ft"
  mkdir -p "$work/traces"
  cp "$work"/run-tp-nsys/traces/*.sqlite "$work/traces/" 2>/dev/null
  cp "$work"/ft/foreign/*.sqlite.gz "$work/traces/" 2>/dev/null
elif [ "$part" = 2 ]; then
  big=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
  separate=$([ "${big:-0}" -lt 100000 ] && echo --separate-tp)  # 32b TP 1 + TP 2 need > 80 GB on GPU 0
  step tp-sweep-8b 230 python -m benchmarks.tp_sweep --presets qwen3-8b --streams 1,8,32,128 \
    --repeats 5 --L 64 --deadline-s 200 --out "$work/tp-sweep-8b.json"
  step tp-sweep-32b 330 python -m benchmarks.tp_sweep --presets qwen3-32b --streams 1,8,32,128 \
    --repeats 5 --L 64 --deadline-s 300 $separate --out "$work/tp-sweep-32b.json"
elif [ "$part" = 4 ]; then  # a held-out set alone (SET=..., default the TP set), 45 s and up to 60 pairs
  # not `step`: its archive of the whole folder (runs, catalogs) would take a minute. 450 s: the
  # call's 600 also hold setup.sh (~40-60 s, before this script's clock starts) and the archives
  # (a 6-sweep run was cut at 600 s mid-archive with 540 here). A cut set resumes where it stopped.
  timeout -k 20 $((${HELDOUT_S:-450} - SECONDS)) python -m benchmarks.heldout_2 --set "${SET:-benchmarks/heldout_tp.json}" \
    --no-nsys --budget-s 45 --max-pairs 60 --out "$work/heldout-tp" > "$work/heldout-tp.log" 2>&1
  echo "heldout-tp: exit $? after $SECONDS s" >> "$work/steps.txt"
  for d in "$work"/heldout-tp/*/; do  # each sweep's results apart (under the 16 MiB a file)
    [ -f "$d/results.json.gz" ] && XZ_OPT=-1 tar -cJf "$out/heldout-$(basename "$d").tar.xz" -C "$work/heldout-tp" \
      --exclude=runs --exclude=catalog.duckdb --exclude=.lock "$(basename "$d")"
  done
  cp "$work/heldout-tp.log" "$work/steps.txt" "$out/"
  exit 0
else  # part 3: the GPU tests on the pair (TP 2 == TP 1 tokens, depth 1 == depth 2), the held-out set
  step tp-gpu-tests 300 python -m pytest -q -m gpu -p no:cacheprovider tests/test_tensor_parallel_gpu.py \
    --junitxml="$work/tp-gpu-tests.xml" -o junit_suite_name="gpu 2x $gpu $rev $(date -u +%FT%TZ)"
  # the held-out set gets what is left of the call's 10 minutes (resumed by a later call where cut)
  step heldout-tp $((550 - SECONDS)) python -m benchmarks.heldout_2 --set benchmarks/heldout_tp.json \
    --no-nsys --budget-s 20 --out "$work/heldout-tp"
  mkdir -p "$work/traces"
  for d in "$work"/heldout-tp/*/; do  # the sweeps' results (their timelines are big: gzip apart)
    n=$(basename "$d"); [ -f "$d/results.json.gz" ] && cp "$d/results.json.gz" "$work/traces/$n.results.json.gz"
  done
fi
tar -cJf "$out/part$part.tar.xz" -C "$work" --exclude='*.sqlite' --exclude='traces' --exclude='run-*' --exclude='ft-work' --exclude='*.nsys-rep' . 2>/dev/null
tar -cf - -C "$work" traces | xz -T0 -3 > "$out/traces$part.tar.xz" 2>/dev/null
ls -la "$out"; cat "$work/steps.txt"
