"""How long each way of ending a tensor-parallel engine takes, and what it leaves (issue #27).

Runs every scenario of testing/tp_shutdown.py as its own script (close, with, interpreter exit, an
exception inside generate, SIGINT to the parent, Ctrl-C to the process group, a worker killed
mid-generate or while rank 0 initialises, a script without the main guard) and prints one line
each: exit code, seconds from the moment the engine was ended until every process had exited (and
until close() returned, or generate raised), what was left running or in /dev/shm.
On the GPU pair:

    python -m tools.gpu_machine.tp_shutdown_times --device cuda --out $OUT

(NVLink multicast stays off: the engine sets NCCL_NVLS_ENABLE=0 and the rest in every process.)
On the CPU (gloo): `--device cpu` with tiny-llama.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from testing import tp_shutdown


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--preset", default=None)
    ap.add_argument("--scenarios", default=",".join(tp_shutdown.SCENARIOS))
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per scenario")
    ap.add_argument("--out", type=Path, default=None, help="folder for tp-shutdown-times.json")
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for scenario in a.scenarios.split(","):
            out = tp_shutdown.run(
                scenario, tp_shutdown.engine_options(a.device, a.preset), Path(tmp), a.timeout
            )
            r, teardown = out.reports, out.teardown_s()
            row = {
                "scenario": scenario,
                "returncode": out.returncode,
                "wall_s": round(out.wall_s, 2),
                "teardown_s": None if teardown is None else round(teardown, 2),
                "close_s": round(r["closed"] - r["done"], 2) if "closed" in r else None,
                "raise_s": round(r["raised"] - r["done"], 2) if "raised" in r else None,
                "left_running": out.left_running(),
                "shm_left": out.shm_left(),
                "cuda_reserved": r.get("cuda_reserved"),
                "error": r.get("error") or (out.stderr.strip().splitlines() or [""])[-1][:300],
                "leak_warning": "leaked" in out.stderr,
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    if a.out is not None:
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / "tp-shutdown-times.json").write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
