"""The wheel stands alone: built from the checkout without a packaging warning, installed into a
fresh virtual environment outside it, it runs the commands of the README and a notebook from a
folder that is not the checkout (so nothing can reach traces/ or the sources by accident).

Offline: the fresh environment sees this interpreter's installed dependencies through a .pth
file (as a worktree's venv does), and bubblelab itself only from the wheel.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT / "traces" / "qwen3-0.6b-s1-d1.sqlite.gz"
NOTEBOOK = ROOT / "notebooks" / "01_step_breakdown.ipynb"

pytestmark = pytest.mark.slow


def _run(args: list, cwd: Path, timeout: float = 600) -> str:
    done = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": "", "COLUMNS": "200"},
    )
    assert done.returncode == 0, f"{args[:3]} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout + done.stderr


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh venv holding the wheel; returns its bin/ folder."""
    tmp = tmp_path_factory.mktemp("wheel")
    build = _run(
        [sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation",
         "-w", tmp / "dist", ROOT],
        cwd=tmp,
    )  # fmt: skip
    assert "absent from the `packages` configuration" not in build, build
    assert "_Warning" not in build
    (wheel,) = (tmp / "dist").glob("bubblelab-*.whl")

    env_dir = tmp / "venv"
    venv.create(env_dir, with_pip=False)
    (site,) = (env_dir / "lib").glob("python*/site-packages")
    deps = [p for p in sys.path if p.endswith("site-packages")]
    (site / "deps.pth").write_text("\n".join(deps) + "\n")
    python = env_dir / "bin" / "python"
    _run(
        [sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps",
         "--no-index", wheel],
        cwd=tmp,
    )  # fmt: skip
    where = _run([python, "-c", "import bubblelab; print(bubblelab.__file__)"], cwd=tmp)
    assert Path(where.strip()).is_relative_to(site), where  # the wheel's copy, not the checkout
    return env_dir / "bin"


def test_the_installed_commands_run_outside_the_checkout(installed, tmp_path):
    from bubblelab.report.example import RUN_DIR

    bubblelab = installed / "bubblelab"
    assert "analyze" in _run([bubblelab, "--help"], cwd=tmp_path)
    assert "steady" in _run([bubblelab, "analyze", TRACE], cwd=tmp_path)
    example = _run(
        [installed / "python", "-c",
         "from bubblelab.report.example import RUN_DIR; print(RUN_DIR)"],
        cwd=tmp_path,
    ).strip()  # fmt: skip
    assert Path(example) != RUN_DIR and (Path(example) / "results.json.gz").is_file()
    # the per-GPU GEMM tables travel with the engine, or an installed engine runs cuBLAS only
    tables = _run(
        [installed / "python", "-c",
         "from bubblelab.engine.linear import TABLE_DIR; "
         "print(sorted(p.name for p in TABLE_DIR.glob('*.json')))"],
        cwd=tmp_path,
    ).strip()  # fmt: skip
    assert tables == str(sorted(p.name for p in (ROOT / "engine" / "gemm_tables").glob("*.json")))
    assert "qwen3-0.6b" in _run([bubblelab, "predict", example], cwd=tmp_path)
    _run([bubblelab, "report", example, "--out", tmp_path / "report.html"], cwd=tmp_path)
    assert "<html" in (tmp_path / "report.html").read_text()
    _run([bubblelab, "export", TRACE, "--out", tmp_path / "export"], cwd=tmp_path)
    assert {p.name for p in (tmp_path / "export").iterdir()} >= {
        "trace.json.gz",
        "runs.parquet",
        "steps.parquet",
    }


def test_a_notebook_runs_on_the_bundled_example(installed, tmp_path):
    pytest.importorskip("nbclient")
    shutil.copy(NOTEBOOK, tmp_path / NOTEBOOK.name)
    # nbclient inside the fresh venv: its `python3` kernel is that venv's interpreter.
    script = (
        "import sys, nbformat; from nbclient import NotebookClient\n"
        "book = nbformat.read(sys.argv[1], as_version=4)\n"
        "NotebookClient(book, kernel_name='python3', timeout=180).execute()\n"
        "print(''.join(o.get('text', '') for c in book.cells for o in c.get('outputs', [])))\n"
    )
    printed = _run([installed / "python", "-c", script, NOTEBOOK.name], cwd=tmp_path)
    assert "4 runs" in printed, printed[-2000:]
    assert json.loads(NOTEBOOK.read_text())["cells"]  # the checkout's copy was not touched
