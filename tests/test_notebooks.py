"""Every notebook in notebooks/ runs top to bottom without an error (CPU): on the committed traces,
and on a run directory of the user's given in its `parameters` cell."""

import re
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


def run_notebook(path: Path, kernel_name: str, run_dir: Path | None = None):
    """Execute a notebook as committed; with run_dir, the way papermill does: a cell setting it
    right after the cell tagged `parameters`."""
    book = nbformat.read(path, as_version=4)
    if run_dir is not None:
        at = next(i for i, c in enumerate(book.cells) if "parameters" in c.metadata.get("tags", []))
        book.cells.insert(at + 1, nbformat.v4.new_code_cell(f"run_dir = {str(run_dir)!r}"))
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
    return book


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_without_error(path, kernel_name):
    book = nbformat.read(path, as_version=4)
    assert all(not cell.get("outputs") for cell in book.cells if cell.cell_type == "code"), (
        f"{path.name} is committed with outputs: clear them"
    )
    run_notebook(path, kernel_name)


@pytest.fixture(scope="module")
def user_run_dir(tmp_path_factory) -> Path:
    from bubblelab.runs.demo import write_demo_run_dir

    run_dir = tmp_path_factory.mktemp("user-run")
    write_demo_run_dir(run_dir, streams=(1, 4), requests_per_stream=3, output_len=24)
    return run_dir


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_takes_the_users_run_directory(path, kernel_name, user_run_dir):
    book = run_notebook(path, kernel_name, user_run_dir)
    printed = "".join(
        o.get("text", "")
        for c in book.cells
        for o in c.get("outputs", [])
        if o.get("name") == "stdout"
    )
    assert f"{user_run_dir.name}: 4 runs" in printed  # it read the run directory, not the traces


@pytest.mark.parametrize("depth", [1, 2], ids=["depth 1 only", "depth 2 only"])
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_takes_runs_at_one_depth(path, kernel_name, tmp_path, depth):
    """A sweep at one depth (run-and-profile --depth 1: its forecast alone) runs top to bottom;
    what needs both depths says it has nothing to show."""
    from bubblelab.runs.demo import write_demo_run_dir

    run_dir = write_demo_run_dir(tmp_path / "one-depth", streams=(1, 4), requests_per_stream=3,
                                 output_len=24, depths=(depth,)).parent  # fmt: skip
    book = run_notebook(path, kernel_name, run_dir)
    printed = "".join(
        o.get("text", "") for c in book.cells for o in c.get("outputs", []) if "text" in o
    )
    if path.stem.startswith("02"):
        assert "no configuration here ran at both depths" in printed


# A measured quantity in prose ("0.2-0.3 ms", "+34.9%", "600 kernels"...) would drift from the runs
# the notebook is pointed at: the numbers belong in the outputs.
MEASURED = re.compile(r"\d+(?:\.\d+)?\s*(?:ms|us|µs|%|kernels)\b")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_prose_states_no_measured_numbers(path):
    book = nbformat.read(path, as_version=4)
    prose = "\n".join(c.source for c in book.cells if c.cell_type == "markdown")
    assert MEASURED.findall(prose) == [], f"{path.name}: numbers in markdown drift from the data"
