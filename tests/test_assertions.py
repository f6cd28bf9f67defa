"""Checks that check (issue #28): every test asserts something about behaviour, and no real check of
the product is a bare `assert`, which `python -O` removes."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("core", "engine", "profiling", "costmodel", "runs", "report", "cli")

# Calls that assert: pytest's, numpy's and torch's assert_* helpers, and the product's own checks,
# which raise InvariantError when a page, row, slot or reference is not back.
RAISES = {"raises", "warns", "fail", "deprecated_call"}
CHECKS = {"check_idle", "check_all_free", "check_drained"}


def _name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else None


class _Body(ast.NodeVisitor):
    """What a function's body does: whether it asserts (outside an except clause, where an assert
    checks only the failure), and the names it calls."""

    def __init__(self) -> None:
        self.asserts, self._in_except = False, 0
        self.calls: set[str] = set()

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        self._in_except += 1
        self.generic_visit(node)
        self._in_except -= 1

    def visit_Assert(self, node: ast.Assert) -> None:
        self.asserts |= not self._in_except
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        name = _name(node.func)
        if name and not self._in_except:
            self.asserts |= name in RAISES or name in CHECKS or name.startswith("assert")
            self.calls.add(name)
        self.generic_visit(node)


def unasserted_tests(folder: Path) -> list[str]:
    """Test functions that assert nothing, directly or through a helper of the test suite (a
    function of `folder`, found by name) that does."""
    bodies: dict[str, list[_Body]] = {}
    where: dict[str, list[str]] = {}
    for path in sorted(folder.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                body = _Body()
                for statement in node.body:
                    body.visit(statement)
                bodies.setdefault(node.name, []).append(body)
                where.setdefault(node.name, []).append(f"{path.name}:{node.lineno}")
    asserting = {name for name, found in bodies.items() if any(b.asserts for b in found)}
    grew = True
    while grew:
        grew = False
        for name, found in bodies.items():
            if name not in asserting and any(b.calls & asserting for b in found):
                asserting.add(name)
                grew = True
    return sorted(
        f"{place} {name}"
        for name, places in where.items()
        if name.startswith("test") and name not in asserting
        for place in places
    )


def test_every_test_asserts_something():
    assert unasserted_tests(ROOT / "tests") == []


def test_the_scan_finds_a_test_without_an_assertion(tmp_path):
    (tmp_path / "test_x.py").write_text(
        "import pytest\n"
        "def helper(x):\n    assert x\n"
        "def test_calls_a_helper():\n    helper(1)\n"
        "def test_raises():\n    with pytest.raises(ValueError):\n        int('x')\n"
        "def test_runs_only():\n    int('1')\n"
        "def test_asserts_only_when_it_fails():\n"
        "    try:\n        int('1')\n    except ValueError as e:\n        assert str(e)\n"
    )
    assert unasserted_tests(tmp_path) == [
        "test_x.py:11 test_asserts_only_when_it_fails",
        "test_x.py:9 test_runs_only",
    ]


def _narrows_a_type(test: ast.expr) -> bool:
    """`assert x is not None` and `assert isinstance(x, T)`: for the type checker, not checks."""
    if isinstance(test, ast.BoolOp):
        return all(_narrows_a_type(v) for v in test.values)
    if isinstance(test, ast.Compare):
        return len(test.ops) == 1 and isinstance(test.ops[0], ast.IsNot)
    return isinstance(test, ast.Call) and _name(test.func) == "isinstance"


def test_no_real_check_in_the_product_is_a_bare_assert():
    found = []
    for folder in PRODUCT:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Assert) and not _narrows_a_type(node.test):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == [], "raise InvariantError (or a BubblelabError) instead"


def test_the_leak_checks_run_under_python_O():
    """A page and a batch row never given back are found with assertions off too."""
    code = (
        "from bubblelab.core.block_manager import BlockManager\n"
        "from bubblelab.core.scheduler import Limits, Scheduler\n"
        "from bubblelab.core.sequence import Sequence\n"
        "blocks = BlockManager(8, 4)\n"
        "blocks.allocate(Sequence('r', [1, 2, 3], None), 3)\n"
        "try:\n    blocks.check_all_free()\nexcept AssertionError as e:\n    print(e)\n"
        "scheduler = Scheduler(Limits(2), BlockManager(8, 4))\n"
        "scheduler.free_rows.pop()\n"
        "try:\n    scheduler.check_all_free()\nexcept AssertionError as e:\n    print(e)\n"
    )
    done = subprocess.run(
        [sys.executable, "-O", "-c", code], capture_output=True, text=True, timeout=120
    )
    assert done.stdout.splitlines() == ["I7: KV pages leaked", "I7: batch rows leaked"], done.stderr
