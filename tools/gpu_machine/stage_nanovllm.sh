#!/usr/bin/env bash
# The original nano-vllm (GeeeekExplorer/nano-vllm, MIT) for the offline GPU machine, as source: exported
# from its git mirror into .peers/nano-vllm/ (git-ignored, never committed, never patched), with the commit
# in .peers/nano-vllm/COMMIT. Run here, before the GPU call, and carry `.peers` with it;
# benchmarks/compare_nanovllm.py puts the folder first on nano-vllm's PYTHONPATH.
#
#   bash tools/gpu_machine/stage_nanovllm.sh [REV]    # default: the pinned commit below
#
# NANOVLLM_MIRROR names another bare mirror (default: the workplace's copy of the GitHub repository).
set -euo pipefail
MIRROR=${NANOVLLM_MIRROR:-/work/.mirror/GeeeekExplorer+nano-vllm/repo}
PINNED=bb823b3e06983d71485a8e1f23715ebd87d98ef8  # "Merge pull request #218 ... chunked-prefill-refactor"
cd "$(dirname "$0")/../.."
DEST=.peers/nano-vllm
commit=$(git --git-dir="$MIRROR" rev-parse --verify "${1:-$PINNED}^{commit}")
rm -rf "$DEST"
mkdir -p "$DEST"
# the package and its licence; the logo, examples and benchmark script stay behind
git --git-dir="$MIRROR" archive "$commit" nanovllm LICENSE README.md pyproject.toml | tar -x -C "$DEST"
git --git-dir="$MIRROR" log -1 --format='%H %cs %s' "$commit" > "$DEST/COMMIT"
echo "staged nano-vllm $(cut -c1-12 "$DEST/COMMIT") in $DEST ($(du -sh "$DEST" | cut -f1)); carry .peers"
