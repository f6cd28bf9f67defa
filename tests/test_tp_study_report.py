"""benchmarks.tp_study_report on the committed TP study (2x H200), run as a user runs it: its table
is the sweep's own numbers, recomputed here by hand, and the figure is written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).parents[1]
DATA = ROOT / "docs" / "measurements" / "2026-11-26" / "tp-study"


def test_the_table_is_the_runs_medians_and_paired_gains(tmp_path):
    sweeps = [DATA / f"tp-sweep-{m}.json" for m in ("8b", "32b")]
    png, md = tmp_path / "tp.png", tmp_path / "table.md"
    cmd = [sys.executable, "-m", "benchmarks.tp_study_report", *map(str, sweeps),
           "--png", str(png), "--md", str(md)]  # fmt: skip
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, timeout=300)
    assert png.read_bytes()[:4] == b"\x89PNG"
    cells = [[c.strip() for c in line.split("|")[1:-1]]
             for line in md.read_text().splitlines() if line.startswith("| qwen3-")]  # fmt: skip
    rows = {tuple(c[:4]): c for c in cells}
    assert len(rows) == 32  # 2 models x 4 stream counts x TP 1, 2 x depth 1, 2
    runs = [r for r in json.loads(sweeps[0].read_text())["runs"] if r["streams"] == 1]
    pick = lambda tp, d, key: [r[key] for r in runs if (r["tp"], r["depth"]) == (tp, d)]  # noqa: E731
    _, _, _, _, repeats, _, step, vs_tp1, _, bubbles, _, gain = rows[("qwen3-8b", "1", "2", "2")]
    assert repeats == "5"
    assert float(step) == pytest.approx(np.median(pick(2, 2, "step_ms_median")), abs=5e-4)
    ratio = np.median(pick(2, 2, "step_ms_median")) / np.median(pick(1, 2, "step_ms_median"))
    assert float(vs_tp1) == pytest.approx(ratio, abs=5e-4)
    gains = [(b / a - 1) * 100 for a, b in
             zip(pick(2, 1, "tokens_per_s"), pick(2, 2, "tokens_per_s"), strict=True)]  # fmt: skip
    assert float(gain.split("%")[0]) == pytest.approx(np.median(gains), abs=0.05)
    # depth 1's bubble, rank 0 / rank 1, each the median of that rank's own runs
    d1 = rows[("qwen3-8b", "1", "2", "1")][9].split(" / ")
    for rank, shown in enumerate(d1):
        own = [r["ranks"][rank]["bubble_ms"] for r in runs if (r["tp"], r["depth"]) == (2, 1)]
        assert float(shown) == pytest.approx(np.median(own), abs=5e-4)
