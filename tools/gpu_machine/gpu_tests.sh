#!/usr/bin/env bash
# The GPU tests as a machine-readable record: pytest JUnit XML whose suite carries the GPU, the
# commit and the date (tests/conftest.py adds them as properties on a CUDA machine). Run from the
# checkout root after `source tools/gpu_machine/setup.sh`; copy the file back to
# docs/measurements/<date>/gpu-tests.xml, where the CPU suite finds it (tests/gpu_record.py).
#   tools/gpu_machine/gpu_tests.sh [OUT_DIR]      (default: $OUT, else docs/measurements/<today>)
set -u
out=${1:-${OUT:-docs/measurements/$(date -u +%F)}}
mkdir -p "$out"
rev=$(cat .git-rev 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo unknown)
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
python3 -m pytest -q -m gpu -p no:cacheprovider --junitxml="$out/gpu-tests.xml" \
  -o junit_suite_name="gpu $gpu $rev $(date -u +%FT%TZ)"
