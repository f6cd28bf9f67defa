"""Every notebook in notebooks/ runs top to bottom without an error (CPU, the committed traces)."""

import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")  # the dev extra; absent on the GPU machine
from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel  # noqa: E402
from nbclient import NotebookClient  # noqa: E402

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))
CELL_TIMEOUT_S = 120


@pytest.fixture(scope="session")
def kernel_name() -> str:
    """The `python3` kernel of this interpreter's environment, installed there (not in ~) if
    missing.

    jupyter_client starts a kernelspec whose argv[0] is "python" with sys.executable, so the
    notebooks run on the interpreter running the tests.
    """
    try:
        spec = KernelSpecManager().get_kernel_spec("python3")
    except NoSuchKernel:
        from ipykernel.kernelspec import install

        install(prefix=sys.prefix)
        spec = KernelSpecManager().get_kernel_spec("python3")
    assert spec.argv[0] in ("python", "python3", sys.executable), (
        f"python3 kernel runs {spec.argv[0]}"
    )
    return "python3"


def test_there_are_notebooks():
    assert [p.name for p in NOTEBOOKS] == [
        "01_step_breakdown.ipynb",
        "02_cost_model.ipynb",
        "03_compare_runs.ipynb",
    ]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_without_error(path, kernel_name):
    book = nbformat.read(path, as_version=4)
    assert all(not cell.get("outputs") for cell in book.cells if cell.cell_type == "code"), (
        f"{path.name} is committed with outputs: clear them"
    )
    # Raises CellExecutionError, naming the cell and its traceback, at the first failing cell.
    NotebookClient(
        book,
        kernel_name=kernel_name,
        timeout=CELL_TIMEOUT_S,
        resources={"metadata": {"path": str(path.parent)}},
    ).execute()
    errors = [
        o for cell in book.cells for o in cell.get("outputs", []) if o.get("output_type") == "error"
    ]
    assert not errors
