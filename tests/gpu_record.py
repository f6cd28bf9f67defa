"""GPU test runs as machine-readable records: pytest JUnit XML under docs/measurements/<date>/
gpu-tests.xml, made on the GPU machine by tools/gpu_machine/gpu_tests.sh. The CPU suite skips the
GPU tests and names the last recorded run (conftest.py), so a skip never passes for a result."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).parents[1]
RECORDS = "docs/measurements/*/gpu-tests.xml"


@dataclass
class GpuRun:
    path: Path
    gpu: str
    commit: str
    date: str  # ISO 8601, UTC
    tests: int
    failures: int
    errors: int
    skipped: int

    @property
    def passed(self) -> int:
        return self.tests - self.failures - self.errors - self.skipped

    def summary(self) -> str:
        return (
            f"last recorded GPU run: {self.date[:10]} on {self.gpu} at commit {self.commit}: "
            f"{self.passed} passed, {self.failures + self.errors} failed, {self.skipped} skipped "
            f"({self.path.relative_to(ROOT)})"
        )


def read_gpu_run(path: Path) -> GpuRun:
    """One record: the suite's properties (gpu, commit, date) or, in records made before they
    existed, its name `gpu <GPU name> <commit> <date>`."""
    root = ET.parse(path).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    if suite is None:
        raise ValueError(f"{path}: no testsuite")
    props = {p.get("name"): p.get("value") for p in suite.iterfind("properties/property")}
    if not {"gpu", "commit", "date"} <= props.keys():
        words = suite.get("name", "").split()
        if len(words) < 4 or words[0] != "gpu":
            raise ValueError(f"{path}: the suite names no GPU, commit and date")
        props = {"gpu": " ".join(words[1:-2]), "commit": words[-2], "date": words[-1]}
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    return GpuRun(path, str(props["gpu"]), str(props["commit"]), str(props["date"]), **counts)


def last_gpu_run(root: Path = ROOT) -> GpuRun | None:
    records = sorted(root.glob(RECORDS), key=lambda p: p.parent.name)
    return read_gpu_run(records[-1]) if records else None
