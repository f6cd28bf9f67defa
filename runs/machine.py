"""What a sweep ran on, recorded once per run directory: the code's git revision, the CPU and its
clocks, the GPU and its driver and clocks, the software.

Every value is best effort: a fact that cannot be read is None, never an error (a run on a machine
without nvidia-smi or outside a git checkout is still a run).
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]  # the checkout an editable install runs from
GPU_QUERY = "name,driver_version,clocks.max.sm,power.limit,memory.total"


def machine_facts() -> dict:
    """Git revision, CPU and GPU facts, as JSON-ready values (report.provenance shows them)."""
    return {
        **git_facts(),
        **cpu_facts(),
        "gpus": gpu_facts(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "torch": _version("torch"),
        "bubblelab": _version("bubblelab"),
    }


def git_facts(checkout: Path = CHECKOUT) -> dict:
    """The revision of the bubblelab checkout that ran, and whether it had uncommitted changes (None
    outside a checkout: an installed copy has no revision of its own). A `.git-rev` file names the
    revision of a copied tree whose own .git (if any) is not the one it came from: it wins."""
    if (checkout / ".git-rev").is_file():
        return copied_tree_facts(checkout)
    if not (checkout / ".git").exists():
        return {"git_revision": None, "git_dirty": None}
    revision = _run(["git", "-C", str(checkout), "rev-parse", "HEAD"])
    status = _run(["git", "-C", str(checkout), "status", "--porcelain", "--untracked-files=no"])
    return {
        "git_revision": revision,
        "git_dirty": None if revision is None or status is None else bool(status),
    }


def copied_tree_facts(checkout: Path) -> dict:
    """A copied tree's revision from its `.git-rev` (tools/gpu_machine/stamp_rev.sh): the revision
    on the first line, then `<blob sha1> <path>` for the tracked files as that revision has them.
    A file edited, or removed, after the stamp makes the tree dirty, so a record never names a
    commit whose code it did not run; a bare revision (an older stamp) leaves it unknown."""
    revision, *manifest = (checkout / ".git-rev").read_text().splitlines() or [""]
    entries = (line.partition(" ") for line in manifest)
    dirty = any(_blob_sha1(checkout / path) != blob for blob, _, path in entries)
    return {"git_revision": revision.strip(), "git_dirty": dirty if manifest else None}


def revision_label(checkout: Path = CHECKOUT) -> str:
    """The short revision for a record's name, `+modified` when the tree differs from it."""
    facts = git_facts(checkout)
    revision = (facts["git_revision"] or "unknown")[:7]
    return revision + ("+modified" if facts["git_dirty"] else "")


def _blob_sha1(path: Path) -> str | None:
    """Git's object name for a file's content (`git hash-object`), computed without git."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def cpu_facts(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict:
    """CPU model, logical cores and clocks (the current clock of the first core; the maximum where
    cpufreq publishes it)."""
    text = _read(cpuinfo) or ""
    model = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
    mhz = re.search(r"^cpu MHz\s*:\s*([\d.]+)$", text, re.M)
    max_khz = _read(Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq"))
    return {
        "cpu_model": model.group(1).strip() if model else (platform.processor() or None),
        "cpu_count": os.cpu_count(),
        "cpu_mhz": float(mhz.group(1)) if mhz else None,
        "cpu_max_mhz": int(max_khz) / 1e3 if max_khz and max_khz.strip().isdigit() else None,
    }


def gpu_facts() -> list[dict]:
    """One record per GPU nvidia-smi lists (none without it): name, driver, maximum SM clock (MHz),
    power limit (W), memory (MiB)."""
    out = _run(["nvidia-smi", f"--query-gpu={GPU_QUERY}", "--format=csv,noheader,nounits"])
    gpus = []
    for line in (out or "").splitlines():
        values = [v.strip() for v in line.split(",")]
        if len(values) == 5:
            name, driver, sm, power, memory = values
            gpus.append(
                {
                    "name": name,
                    "driver": driver,
                    "sm_clock_max_mhz": _number(sm),
                    "power_limit_w": _number(power),
                    "memory_mib": _number(memory),
                }
            )
    return gpus


def _run(argv: list[str]) -> str | None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:  # "[N/A]"
        return None


def _version(dist: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return sys.modules[dist].__version__ if dist in sys.modules else None
