#!/usr/bin/env bash
# Names the revision a copied tree comes from, for the records made on the GPU machine: .git-rev holds
# the short HEAD, then `<blob sha1> <path>` for every tracked file outside the recorded data (which
# slim_checkout.sh may set aside). On the machine runs/machine.py hashes those files again, so a file
# edited after the stamp marks the record `+modified` instead of naming a commit it did not run.
#   bash tools/gpu_machine/stamp_rev.sh         # from the checkout; slim_checkout.sh aside runs it
#   bash tools/gpu_machine/stamp_rev.sh label   # on the machine: the revision a record names
set -eu
if [ "${1:-}" = label ]; then
  python3 -c 'from bubblelab.runs.machine import revision_label; print(revision_label())' 2>/dev/null \
    || echo unknown
  exit 0
fi
cd "$(git rev-parse --show-toplevel)"
{
  git rev-parse --short HEAD
  git ls-tree -r HEAD | awk -F'\t' '$1 ~ /^100/ && $2 !~ /^(docs\/measurements|reports|traces)\// {split($1, m, " "); print m[3], $2}'
} > .git-rev
