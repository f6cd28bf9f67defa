#!/usr/bin/env bash
# Does a worker reuse the compile caches that a worker under nsys filled? (Issue #25 item 6: on a
# fresh H200 a sweep's first unprofiled worker spent 14 s compiling and capturing after the nsys
# worker's 19 s, where a warm one spends 3-4 s.) Four processes, each building one qwen3-4b engine
# as a sweep's worker does (benchmarks.capture_cost, 1024-token budget, 32 rows), one after another:
# caches emptied, plain; plain; caches emptied, under nsys with the sweep's options; plain.
# ROUND=three instead: three plain processes, the last two profiled (cProfile), each cache's files
# counted after each, then two with Inductor compiling in-process (TORCHINDUCTOR_COMPILE_THREADS=1).
# Run from the checkout root after `source tools/gpu_machine/setup.sh` (~2-3 minutes):
#   [ROUND=nsys|three] bash tools/gpu_machine/compile_cache.sh
# Writes $OUT/compile-cache.log and one <name>.json per process (its set-up's parts, its compile
# caches' hits and misses).
set -u
OUT=${OUT:-/tmp/compile-cache-out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/compile-cache.log") 2>&1
echo "git $(bash tools/gpu_machine/stamp_rev.sh label)  $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name --format=csv,noheader
inductor=$(python3 -c "from torch._inductor.runtime.cache_dir_utils import cache_dir; print(cache_dir())")
triton=${TRITON_CACHE_DIR:-$HOME/.triton/cache}
empty() {
  rm -rf "$inductor" "$triton"
  echo "caches emptied: $inductor $triton"
}
build() {  # name, then the command that runs python (default: python3)
  local name=$1 start
  shift
  [ $# -gt 0 ] || set -- python3
  start=$(date +%s.%N)
  "$@" -m benchmarks.capture_cost --budgets 1024 --out "$OUT/$name.json" 2>&1 \
    | grep -v -i -E "warn|^\s*$" | tail -4
  echo "$name: process wall $(python3 -c "import time; print(f'{time.time() - $start:.1f}')") s"
}
counts() {  # files in each cache, after a process
  for d in "$inductor"/* "$triton"; do [ -d "$d" ] && echo "  $(find "$d" -type f | wc -l) files in $d"; done
}
profiled() {  # name: a plain process under cProfile, its 25 slowest calls by cumulative time after
  build "$1" python3 -m cProfile -o "$OUT/$1.prof"
  python3 -c "import pstats; pstats.Stats('$OUT/$1.prof').sort_stats('cumulative').print_stats(25)" \
    | grep -E "^ +[0-9]" | cut -c1-160
}
case ${ROUND:-nsys} in
nsys)  # does a worker under nsys fill the caches for the next?
  nsys_opts=$(python3 -c "from bubblelab.profiling.nsys import PROFILE_OPTIONS as o; print(' '.join(o))")
  empty
  build plain-cold
  build plain-warm
  empty
  build nsys-cold nsys profile $nsys_opts -o /tmp/compile-cache-nsys --force-overwrite true python3
  build plain-after-nsys
  ;;
three)  # three plain processes: which cache the third has that the second lacks
  empty
  build three-1; counts
  profiled three-2; counts
  profiled three-3; counts
  empty
  build threads1-1 env TORCHINDUCTOR_COMPILE_THREADS=1 python3; counts
  build threads1-2 env TORCHINDUCTOR_COMPILE_THREADS=1 python3; counts
  ;;
esac
du -sh "$inductor" "$triton" 2>/dev/null
