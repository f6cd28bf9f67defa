#!/usr/bin/env bash
# The GPU tests as a machine-readable record: pytest JUnit XML whose suite carries the GPU, the
# commit and the date (tests/conftest.py adds them as properties on a CUDA machine). Run from the
# checkout root after `source tools/gpu_machine/setup.sh`; copy the file back to
# docs/measurements/<date>/gpu-tests.xml, where the CPU suite finds it (tests/gpu_record.py).
#   tools/gpu_machine/gpu_tests.sh [OUT_DIR [TEST_PATH...]]
# OUT_DIR defaults to $OUT, else docs/measurements/<today>. TEST_PATHs (files or node ids) narrow
# the run to them, still `-m gpu` only; it then writes gpu-tests-part.xml, which the CPU suite does
# not take for a record of the whole suite.
set -u
out=${1:-${OUT:-docs/measurements/$(date -u +%F)}}
shift $(( $# > 0 ? 1 : 0 ))
mkdir -p "$out"
rev=$(bash tools/gpu_machine/stamp_rev.sh label)
names=$(nvidia-smi --query-gpu=name --format=csv,noheader)
count=$(wc -l <<< "$names")
gpu=$(head -1 <<< "$names")
if [ "$count" -gt 1 ]; then gpu="${count}x $gpu"; fi
record=gpu-tests.xml
if [ $# -gt 0 ]; then record=gpu-tests-part.xml; fi
python3 -m pytest -q -m gpu -p no:cacheprovider --junitxml="$out/$record" \
  -o junit_suite_name="gpu $gpu $rev $(date -u +%FT%TZ)" "$@"
