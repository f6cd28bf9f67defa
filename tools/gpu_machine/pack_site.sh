#!/usr/bin/env bash
# Shrinks .device/ for the transfer: its wheels unpacked, their shared libraries stripped, packed as
# one xz archive (.device/site.tar.xz, ~28 MB against ~41 MB of wheels), which setup.sh unpacks on the
# GPU machine. The wheels move to .device-wheels/ (git-ignored) so they do not travel too:
#   bash tools/gpu_machine/pack_site.sh          # after ../shared/device/prepare
#   bash tools/gpu_machine/pack_site.sh undo     # the wheels back, the archive gone
set -eu
cd "$(git rev-parse --show-toplevel)"
if [ "${1:-}" = undo ]; then
  [ -d .device-wheels ] && rm -rf .device/whl && mv .device-wheels .device/whl
  rm -f .device/site.tar.xz && echo "wheels back in .device/whl"
  exit 0
fi
[ -d .device/whl ] || { echo "no .device/whl: run ../shared/device/prepare first" >&2; exit 1; }
build=$(mktemp -d)
for w in .device/whl/*.whl; do unzip -q -o "$w" -d "$build"; done
find "$build" -name "*.so*" -type f -exec strip --strip-unneeded {} \; 2>/dev/null || true
tar -C "$build" -cf - . | xz -T0 -6 > .device/site.tar.xz
rm -rf "$build" .device-wheels && mv .device/whl .device-wheels
echo ".device: $(du -sh .device | cut -f1) (site.tar.xz $(du -h .device/site.tar.xz | cut -f1))"
