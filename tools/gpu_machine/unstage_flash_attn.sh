#!/usr/bin/env bash
# On the GPU machine, from the repo root, in EVERY staging call (see tools/gpu_machine/README.md): copies whatever .fa4?/ parts this call carried to /tmp/fa4parts (so they survive even if
# the checkout's ignored dirs do not), and once all parts named in MANIFEST.json are there, checks the sha256
# and extracts them into /tmp/fa4site. Then writes /tmp/fa4site/env.sh (source it) and prints the PYTHONPATH.
# Exit 0 also while parts are still missing (a staging call is not a failure); exit 1 on a bad checksum.
set -u
PARTS=${FA4_PARTS:-/tmp/fa4parts}
SITE=${FA4_SITE:-/tmp/fa4site}
mkdir -p "$PARTS"
for d in .fa4?; do
  [ -d "$d" ] || continue
  # .fa4t/: apache-tvm-ffi's libtvm_ffi_testing.so, which .device/'s copy lacks (env.sh places it)
  [ -f "$d/libtvm_ffi_testing.so" ] && cp -f "$d/libtvm_ffi_testing.so" "$PARTS"/ && continue
  cp -f "$d"/MANIFEST.json "$PARTS"/ && cp -f "$d"/fa4site.tar.xz.* "$PARTS"/ && echo "unstage: took $(ls "$d" | grep -v MANIFEST) from $d/"
done
[ -f "$PARTS/MANIFEST.json" ] || { echo "unstage: no part carried yet"; exit 0; }

# Python, not xz(1): the stdlib's lzma reads the x86-BCJ xz stream and the image need not have xz installed.
python3 - "$PARTS" "$SITE" <<'EOF'
import hashlib, io, json, sys, tarfile, time
from pathlib import Path
parts_dir, site = Path(sys.argv[1]), Path(sys.argv[2])
m = json.loads((parts_dir / "MANIFEST.json").read_text())
done = site / ".complete"
if done.exists() and done.read_text().strip() == m["sha256"]:
    print(f"unstage: {site} already extracted ({m['sha256'][:12]})"); sys.exit(0)
missing = [p for p in m["parts"] if not (parts_dir / p).exists()]
if missing:
    have = len(m["parts"]) - len(missing)
    print(f"unstage: {have}/{len(m['parts'])} parts here, still missing {missing}"); sys.exit(0)
data = b"".join((parts_dir / p).read_bytes() for p in m["parts"])
if hashlib.sha256(data).hexdigest() != m["sha256"]:
    print(f"unstage: sha256 mismatch over {m['parts']}: re-carry the parts"); sys.exit(1)
t = time.perf_counter()
site.mkdir(parents=True, exist_ok=True)
with tarfile.open(fileobj=io.BytesIO(data), mode="r:xz") as tar:
    tar.extractall(site, filter="fully_trusted")
done.write_text(m["sha256"])
print(f"unstage: extracted {len(data) / 1e6:.1f} MB into {site} in {time.perf_counter() - t:.1f} s")
EOF
rc=$?
[ $rc -ne 0 ] && exit $rc
if [ -f "$SITE/.complete" ]; then
  # dsl_packages: where the nvidia-cutlass-dsl .pth would point (a .pth is only read from site dirs).
  FA4_PYTHONPATH="$SITE:$SITE/nvidia_cutlass_dsl/dsl_packages"
  echo "export PYTHONPATH=$FA4_PYTHONPATH\${PYTHONPATH:+:\$PYTHONPATH}" > "$SITE/env.sh"
  # `import tvm_ffi` loads libtvm_ffi_testing.so from its lib/: put the carried copy there (once
  # .device/'s packages are installed, i.e. when env.sh is sourced after setup.sh).
  cat >> "$SITE/env.sh" <<'ENV'
tvm_lib=$(python3 -c 'import importlib.util, os; print(os.path.dirname(importlib.util.find_spec("tvm_ffi").origin))' 2>/dev/null)/lib
if [ -f /tmp/fa4parts/libtvm_ffi_testing.so ] && [ -d "$tvm_lib" ] && [ ! -f "$tvm_lib/libtvm_ffi_testing.so" ]; then
  cp /tmp/fa4parts/libtvm_ffi_testing.so "$tvm_lib/"
fi
ENV
  echo "unstage: PYTHONPATH=$FA4_PYTHONPATH (prepend; or: source $SITE/env.sh)"
fi
exit 0
