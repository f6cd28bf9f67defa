"""The cost model's predictions as one recorded commit makes them (the held-out analysis).

    .venv/bin/python -m tools.docs.costmodel_at_commit 3f021e1bbd \\
        --sweep docs/measurements/2026-11-23/costmodel-heldout \\
        --out docs/measurements/2026-11-23/costmodel-heldout/predictions-3f021e1.json

The held-out set is analysed with the model at the commit docs/costmodel-heldout.md records,
and with nothing newer: that commit's package alone (`git archive`, installed without dependencies
into build/), imported in a fresh interpreter with it at PYTHONPATH's front, so today's checkout
cannot leak in. Each results file (held-out-NAME.results.json.gz) is read as a run directory
NAME/, the layout that commit knew; the table of `costmodel.predict.predict_runs` is written as
JSON records with a `name` column. With --check, the JSON already there is compared instead (exit
1 on any difference).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).parents[2]
PREFIXES = ("held-out-", "dev-")
# Run inside the frozen package: read each NAME/results.json.gz, predict, print records.
PREDICT = """
import json, sys
from pathlib import Path
import pandas as pd
from bubblelab.costmodel import predict
from bubblelab.costmodel.predict import predict_runs
from bubblelab.runs.rundir import read_results
assert predict.__file__.startswith(sys.argv[2]), predict.__file__  # the frozen copy, not ours
tables = []
for run_dir in sorted(p for p in Path(sys.argv[1]).iterdir() if p.is_dir()):
    r = read_results(run_dir)
    tables.append(predict_runs(r.runs, r.steps, r.requests).assign(name=run_dir.name))
print(pd.concat(tables, ignore_index=True).to_json(orient="records", indent=1))
"""


def install(commit: str, target: Path) -> Path:
    """The package of `commit`, installed (no dependencies) under target/lib; returns lib."""
    lib = target / "lib"
    if (target / "COMMIT").is_file() and (target / "COMMIT").read_text() == commit:
        return lib  # installed before: the same commit's files
    shutil.rmtree(target, ignore_errors=True)
    src = target / "src"
    src.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", commit], cwd=ROOT, capture_output=True, check=True)
    with tempfile.TemporaryFile() as f:
        f.write(archive.stdout)
        f.seek(0)
        tarfile.open(fileobj=f).extractall(src, filter="data")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
         "--no-index", "--target", str(lib), str(src)],
        check=True, capture_output=True,
    )  # fmt: skip
    (target / "COMMIT").write_text(commit)
    return lib


def predict_at(commit: str, sweep: Path, work: Path) -> str:
    """predict_runs of `commit` on every results file of `sweep`, as JSON records (pandas')."""
    lib = install(commit, work / commit)
    runs = work / "runs"
    shutil.rmtree(runs, ignore_errors=True)
    for path in sorted(sweep.glob("*.results.json*")):
        name = path.name.split(".results.json")[0]
        name = next((name[len(p) :] for p in PREFIXES if name.startswith(p)), name)
        (runs / name).mkdir(parents=True)
        shutil.copy(path, runs / name / ("results.json" + path.name.split(".results.json")[1]))
    env = {**os.environ, "PYTHONPATH": str(lib)}
    done = subprocess.run(
        [sys.executable, "-c", PREDICT, str(runs), str(lib)],
        cwd=work, env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("commit", help="the model commit (docs/costmodel-heldout.md)")
    parser.add_argument("--sweep", type=Path, required=True, help="a folder of results files")
    parser.add_argument("--out", type=Path, required=True, help="the predictions (JSON records)")
    parser.add_argument("--check", action="store_true", help="compare with --out, do not write")
    parser.add_argument("--work", type=Path, default=ROOT / "build" / "costmodel-at-commit")
    args = parser.parse_args()
    text = predict_at(args.commit, args.sweep.resolve(), args.work.resolve())
    records = json.loads(text)
    if not args.check:
        args.out.write_text(json.dumps(records, indent=1))
        print(f"{args.out}: {len(records)} rows at {args.commit}")
        return
    same = json.loads(args.out.read_text()) == records
    verdict = "the same" if same else "DIFFERENT"
    print(f"{args.out}: {verdict} at {args.commit} ({len(records)} rows)")
    sys.exit(0 if same else 1)


def model_commit(held_out: dict, root: Path = ROOT) -> str:
    """The model the table was made with: the set's frozen commit, and whether costmodel/'s code
    has changed since (model_changed), or this checkout's commit when none was recorded."""
    frozen = held_out.get("model_commit")
    try:
        command = ["git", "-C", str(root), "rev-parse", "--short", "HEAD"]
        head = subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip()
        if not frozen:
            return f"costmodel/ at {head} (no model commit recorded in the set)"
        changed = model_changed(root, frozen)
    except (OSError, subprocess.CalledProcessError):
        return f"frozen at {frozen} (not checked: no git)" if frozen else "unknown (no git)"
    return f"costmodel/ at {frozen}" + (
        " — CHANGED since: these are not the frozen model's predictions" if changed else ""
    )


# What a held-out table calls (benchmarks.heldout_2_table): the modules its predictions come from,
# and the folders whose modules they may import (core/: the engine's scheduler the replay runs).
PREDICTION_ENTRIES = ("predict", "carried", "crossgpu", "headline")
MODEL_DIRS = ("costmodel", "core")


def model_changed(root: Path, frozen: str) -> bool:
    """Whether the checkout computes other predictions than it did at commit `frozen`: the modules
    of costmodel/ and core/ that the predictions import (from PREDICTION_ENTRIES, at either commit;
    every module of costmodel/ where there are none) compared as syntax trees without their
    docstrings. So a reworded docstring, comment or README is no change to the model (a docstring
    once flagged a frozen set's table as CHANGED), and neither is a module no prediction imports
    (the repeat rule, which decides how many runs are made, not what is predicted from them); a
    change to the scheduler the whole-run replay runs is one."""

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                              check=True).stdout  # fmt: skip

    then_names = [name for name in git("ls-tree", "-r", "--name-only", frozen, "--", *MODEL_DIRS)
                  .splitlines() if name.endswith(".py")]  # fmt: skip
    then = {name: git("show", f"{frozen}:{name}") for name in then_names}
    now = {str(p.relative_to(root)): p.read_text()
           for d in MODEL_DIRS for p in (root / d).rglob("*.py")}  # fmt: skip
    read = _closure(then) | _closure(now)
    if {n for n in then if n in read} != {n for n in now if n in read}:
        return True
    return any(_code(then[name]) != _code(now[name]) for name in sorted(read) if name in now)


def _closure(sources: dict[str, str]) -> set[str]:
    """The files (paths as keys) that the prediction entries import, directly or not, with
    costmodel/'s __init__; every file of costmodel/ when no entry is there."""
    todo = [f"costmodel/{m}.py" for m in PREDICTION_ENTRIES if f"costmodel/{m}.py" in sources]
    if not todo:
        return {path for path in sources if path.startswith("costmodel/")}
    todo.append("costmodel/__init__.py")
    seen: set[str] = set()
    while todo:
        path = todo.pop()
        if path in seen or path not in sources:
            continue
        seen.add(path)
        todo.extend(_imported(path, sources[path]))
    return seen


def _imported(path: str, source: str) -> set[str]:
    """The files of MODEL_DIRS a module imports: `from .x import`, `from . import x`, `from
    ..core.x import`, `from ..core import x` and `bubblelab.<dir>.x`."""
    package = path.split("/")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ImportFrom):
            continue
        parts = (node.module or "").split(".") if node.module else []
        if node.level == 1:
            folder, rest = package, parts
        elif node.level == 2 and parts:
            folder, rest = parts[0], parts[1:]
        elif node.level == 0 and len(parts) > 1 and parts[0] == "bubblelab":
            folder, rest = parts[1], parts[2:]
        else:
            continue
        if folder not in MODEL_DIRS:
            continue
        names = [rest[0]] if rest else [a.name for a in node.names]
        out |= {f"{folder}/{name}.py" for name in names}
    return out


def _code(source: str) -> str:
    """A module's syntax tree without its docstrings (comments are never in it)."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        holds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
        if isinstance(node, holds) and ast.get_docstring(node, clean=False) is not None:
            node.body = node.body[1:] or [ast.Pass()]
    return ast.dump(tree)


if __name__ == "__main__":
    main()
