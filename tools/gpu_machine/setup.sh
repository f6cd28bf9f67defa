# Sourced at the start of every command on the GPU machine, from the checkout's root:
#   source tools/gpu_machine/setup.sh && <command>
# The staged wheels and nsys (.device/remote-setup.sh, from the project's GPU-machine set-up), the staged
# packages' files when they travel as one xz archive (.device/site.tar.xz: stripped and xz-compressed they
# are ~12 MiB smaller than the wheels, which keeps checkout + .device under the 64 MiB transfer), then this
# checkout installed editable, so `bubblelab.<folder>` resolves to the checkout's folders.
source .device/remote-setup.sh || return 1
# The package is the checkout's root: a bubblelab/ folder left by the old layout's ignored caches on a
# reused machine would be found first on PYTHONPATH and shadow it as a namespace package.
rm -rf bubblelab
if [ -f .device/site.tar.xz ]; then tar -xJf .device/site.tar.xz -C /tmp/site || return 1; fi
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . >/tmp/bubblelab-install.log 2>&1 \
  || { tail -5 /tmp/bubblelab-install.log; return 1; }
# The machine's torch has no bytecode and PYTHONDONTWRITEBYTECODE forbids writing it, so every process
# compiled torch's sources again (~8 s of each process's start). Cache it under /tmp as an install would.
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX=/tmp/pycache
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # never NVLink multicast
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu --format=csv,noheader
