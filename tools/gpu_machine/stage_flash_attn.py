"""Stage flash-attn-4 (CuTe DSL) and what it and nano-vllm lack for the offline GPU machine
(nano-vllm itself goes over as source: tools/gpu_machine/stage_nanovllm.sh).

The GPU machine has no network and a call carries at most 64 MiB (checkout ~14 MB, `.device/` ~43
MB), so the packages go over as one tar.xz split into parts of at most PART_BYTES, each part in its
own git-ignored directory `.fa4a/`, `.fa4b/`, ... that one staging call carries (see
tools/gpu_machine/README.md). On the GPU, tools/gpu_machine/unstage_flash_attn.sh collects the parts
and extracts them.

    python -m tools.gpu_machine.stage_flash_attn   # downloads to /tmp/fa4stage, writes .fa4a/ ...

What goes over (all pinned, py3.12 manylinux x86_64, --no-deps), and why nothing else does:
  flash-attn-4                   the CuTe DSL kernels (pure Python: flash_attn/cute/, a namespace
                                 package)
  nvidia-cutlass-dsl-libs-core   the `cutlass` / `cutlass.cute` Python package (pure Python)
  nvidia-cutlass-dsl-libs-base   cutlass._mlir Python bindings (the .py half of the compiler)
  nvidia-cutlass-dsl-libs-cu13   _cutlass_ir.cu13 (the compiler, 193 MB, needs only libc) +
                                 libcute_dsl_runtime
  quack-kernels, einops          imported by flash_attn.cute at import time
  xxhash                         the one dependency of nano-vllm the GPU machine lacks
Already on the GPU machine: torch 2.11 (which requires cuda-bindings 13 and the CUDA 13 runtime
wheels), numpy, triton, transformers (+ safetensors, tqdm), and from .device/ apache-tvm-ffi
0.1.15.post2 less its libtvm_ffi_testing.so, which `import tvm_ffi` loads: that one file goes over
in `.fa4t/` (--tvm-only stages just it). Not needed: the nvidia-cutlass-dsl meta wheel (only a
.pth, replaced by PYTHONPATH), torch-c-dlpack-ext (torch >= 2.10 has the DLPack exchange API
itself), protobuf (declared but never imported).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout: parts go to its .fa4?/

WHEELS: dict[str, str] = {
    "flash-attn-4": "4.0.0b36",
    "nvidia-cutlass-dsl-libs-core": "4.8.1",
    "nvidia-cutlass-dsl-libs-base": "4.8.1",
    "nvidia-cutlass-dsl-libs-cu13": "4.8.1",
    "quack-kernels": "0.6.5",
    "einops": "0.8.1",
    "xxhash": "4.1.0",
}
# Paths (relative to the site tree) that nothing imports at run time.
DROP: list[str] = [
    # IKET profiler CLI (run-iket); cute.experimental uses cutlass._mlir
    "nvidia_cutlass_dsl/dsl_packages/iket",
    "nvidia_cutlass_dsl/cu13/lib/stubs",  # aarch64 / QNX link stubs for AOT export
    "nvidia_cutlass_dsl/cu13/lib/libcuda_dialect_runtime_static.a",
    "nvidia_cutlass_dsl/cu13/include",  # AOT export headers
    "flash_attn/cute/benchmark.py",
    "flash_attn/cute/benchmark_flash_attention_fp8.py",
]
PART_BYTES = 18_000_000  # two parts + the checkout stay under one call's 64 MiB
ARCHIVE = "fa4site.tar.xz"
UNSTAGE = "tools/gpu_machine/unstage_flash_attn.sh"


def download(dest: Path, wheels: dict[str, str] = WHEELS) -> list[Path]:
    """The pinned wheels (name -> version) for the GPU machine's Python, in that order."""
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--pre",
        "--python-version",
        "3.12",
        "--implementation",
        "cp",
        "--abi",
        "cp312",
        "--platform",
        "manylinux_2_28_x86_64",
        "-d",
        str(dest),
    ]
    subprocess.run(cmd + [f"{name}=={version}" for name, version in wheels.items()], check=True)
    found = []
    for name, version in wheels.items():
        match = sorted(dest.glob(f"{name.replace('-', '_')}-{version}-*.whl"))
        if not match:
            raise SystemExit(f"no wheel for {name}=={version} in {dest}")
        found.append(match[-1])
    return found


def unpack(wheels: list[Path], site: Path) -> None:
    shutil.rmtree(site, ignore_errors=True)
    site.mkdir(parents=True)
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as z:
            z.extractall(site)
    for rel in DROP:
        target = site / rel
        shutil.rmtree(target) if target.is_dir() else target.unlink(missing_ok=True)
    for cache in list(site.rglob("__pycache__")):
        shutil.rmtree(cache)
    for so in site.rglob(
        "*.so"
    ):  # zipfile drops the exec bit; dlopen does not need it, but keep it tidy
        so.chmod(0o755)


def pack(site: Path, archive: Path) -> None:
    """tar | xz with the x86 BCJ filter: ~8% smaller than plain -9e on the 237 MB of compiler
    binaries."""
    tar = subprocess.Popen(
        [
            "tar",
            "--sort=name",
            "--owner=0",
            "--group=0",
            "--numeric-owner",
            "-C",
            str(site),
            "-cf",
            "-",
            ".",
        ],
        stdout=subprocess.PIPE,
    )
    with archive.open("wb") as out:
        subprocess.run(
            ["xz", "--x86", "--lzma2=preset=9e", "-T1", "-c"],
            stdin=tar.stdout,
            stdout=out,
            check=True,
        )
    if tar.wait():
        raise SystemExit("tar failed")


def split(archive: Path, parts_root: Path) -> list[Path]:
    for old in parts_root.glob(".fa4?"):
        shutil.rmtree(old)
    data = archive.read_bytes()
    chunks = [data[i : i + PART_BYTES] for i in range(0, len(data), PART_BYTES)]
    parts = [f"{ARCHIVE}.{i:02d}" for i in range(len(chunks))]
    manifest = {
        "archive": ARCHIVE,
        "sha256": hashlib.sha256(data).hexdigest(),
        "bytes": len(data),
        "parts": parts,
        "wheels": WHEELS,
    }
    dirs = []
    for i, chunk in enumerate(chunks):
        d = parts_root / f".fa4{chr(ord('a') + i)}"
        d.mkdir()
        (d / parts[i]).write_bytes(chunk)
        (d / "MANIFEST.json").write_text(json.dumps(manifest, indent=1))  # each knows the whole set
        dirs.append(d)
    return dirs


TVM_FFI = ("apache-tvm-ffi", "0.1.15.post2")
TVM_TESTING = "tvm_ffi/lib/libtvm_ffi_testing.so"


def stage_tvm_testing(work: Path, parts_root: Path) -> Path:
    """The apache-tvm-ffi wheel's libtvm_ffi_testing.so (missing from .device/'s copy of the
    package) into `.fa4t/`; env.sh puts it beside libtvm_ffi.so on the GPU machine."""
    name, version = TVM_FFI
    (wheel,) = download(work / "tvm", {name: version})
    out = parts_root / ".fa4t"
    out.mkdir(exist_ok=True)
    with zipfile.ZipFile(wheel) as z:
        (out / Path(TVM_TESTING).name).write_bytes(z.read(TVM_TESTING))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--work", type=Path, default=Path("/tmp/fa4stage"), help="downloads and the unpacked tree"
    )
    ap.add_argument("--tvm-only", action="store_true", help="stage only .fa4t/ (see above)")
    args = ap.parse_args()
    if args.tvm_only:
        print(f"staged {stage_tvm_testing(args.work, ROOT)}/: carry it with the last call")
        return
    wheels = download(args.work / "wheels")
    site = args.work / "site"
    unpack(wheels, site)
    size = sum(f.stat().st_size for f in site.rglob("*") if f.is_file())
    print(f"site tree: {size / 1e6:.1f} MB unpacked")
    archive = args.work / ARCHIVE
    pack(site, archive)
    print(f"{ARCHIVE}: {archive.stat().st_size / 1e6:.1f} MB")
    dirs = split(archive, ROOT)
    tvm = stage_tvm_testing(args.work, ROOT)
    for d in dirs:
        print(f"  {d.name}/  {sum(f.stat().st_size for f in d.iterdir()) / 1e6:.1f} MB")
    pairs = [[d.name for d in dirs[i : i + 2]] for i in range(0, len(dirs), 2)]
    print("carry plan (back to back, the machine is released after ~30 s idle):")
    for n, pair in enumerate(pairs, 1):
        print(f"  call {n}: carry {pair}: bash {UNSTAGE}")
    print(
        f"  call {len(pairs) + 1}: carry ['.device', '{tvm.name}']: "
        f"source .device/remote-setup.sh && bash {UNSTAGE} && source /tmp/fa4site/env.sh && "
        "python -m tools.gpu_machine.fa4_smoke --out $OUT"
    )


if __name__ == "__main__":
    main()
