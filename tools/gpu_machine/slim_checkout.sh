#!/usr/bin/env bash
# The GPU machine receives the working tree whole (tracked files and the carried .device/, 64 MiB at
# most). With .device/ at ~24 MB, the tracked files must stay under ~40 MB, and the recorded traces
# and results under docs/measurements/ and reports/ have passed that. None of them is read on the GPU
# machine, so before a call set the largest aside in the working tree, and bring them back after:
#   bash tools/gpu_machine/slim_checkout.sh aside     # removes them from the working tree only
#   SLIM_BUDGET_MIB=30 bash tools/gpu_machine/slim_checkout.sh aside   # when .device/ is larger
#   bash tools/gpu_machine/slim_checkout.sh back      # git checkout restores those deleted
# `aside` also stamps the tree's revision into .git-rev (stamp_rev.sh), which the records made on the
# machine name, and `back` removes it.
# Nothing is committed either way. Set aside, a file is marked skip-worktree, so `git status` shows it
# unchanged and `git commit -a` cannot record its removal (cc873b8 did, before this mark).
set -eu
cd "$(git rev-parse --show-toplevel)"
budget=$((${SLIM_BUDGET_MIB:-38} * 1024 * 1024))  # the tracked files' share of the transfer (MiB)
big() {  # tracked files under docs/measurements/ and reports/, largest first
  git ls-files -z docs/measurements reports | xargs -0 du -b | sort -rn | awk '{print $2}'
}
case "${1:-}" in
  aside)
    total=$(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1)
    for f in $(big); do
      [ "$total" -le "$budget" ] && break
      [ -f "$f" ] || continue
      total=$((total - $(stat -c %s "$f"))); rm "$f"; git update-index --skip-worktree -- "$f"
      echo "aside: $f"
    done
    echo "tracked files in the working tree: $((total / 1024 / 1024)) MiB"
    bash tools/gpu_machine/stamp_rev.sh && echo "stamped: $(head -1 .git-rev)"
    ;;
  back)  # only the files set aside (marked, or deleted here): other changes under them stay
    git ls-files -v docs/measurements reports | sed -n 's/^S //p' | tr '\n' '\0' \
      | xargs -0 -r git update-index --no-skip-worktree --
    git ls-files -d -z docs/measurements reports | xargs -0 -r git checkout -- && echo "restored"
    rm -f .git-rev ;;
  *) echo "usage: $0 aside|back" >&2; exit 2 ;;
esac
