"""The run contract in code (core.contract) says what docs/phases.md says."""

from __future__ import annotations

import re
from pathlib import Path

from bubblelab.core.contract import (
    DOMAIN,
    HOST_PHASES,
    NUMBER,
    REQUIRED_STEP_COLUMNS,
    STEP_COLUMNS,
    STEP_HOST_PHASES,
    STEP_TABLE,
    TEXT,
)

DOC = (Path(__file__).resolve().parents[1] / "docs" / "phases.md").read_text()


def section(heading: str) -> str:
    """The text of the doc's section whose heading starts with `heading`, up to the next one."""
    start = DOC.index(f"\n## {heading}")
    end = DOC.find("\n## ", start + 1)
    return DOC[start:end]


def test_the_nvtx_domain_and_ranges_are_the_docs():
    nvtx = section("NVTX")
    assert f"(domain `{DOMAIN}`" in nvtx
    ranges = re.findall(r"^\| `(\w+)`", nvtx, flags=re.MULTILINE)
    # tensor parallel adds `handoff` on rank 0; every other range is a phase of the loop
    assert ranges == [*HOST_PHASES, "handoff"]
    assert set(STEP_HOST_PHASES) <= set(HOST_PHASES)


def test_the_per_step_table_is_the_docs():
    table = section("The per-step table")
    listed = " ".join(table.strip().splitlines()[1:3]).split(", ")
    assert listed == list(STEP_COLUMNS)
    assert [c for c, kind in STEP_TABLE.items() if kind == TEXT] == ["run_id", "kind"]
    assert set(STEP_TABLE.values()) == {TEXT, NUMBER}
    assert set(STEP_COLUMNS) - set(REQUIRED_STEP_COLUMNS) == {"kernel_gap_ms"}
