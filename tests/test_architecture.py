"""docs/architecture.md stays true: every dotted `bubblelab.` name in backticks there resolves."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path
from typing import Any

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"
NAMES = sorted(set(re.findall(r"`(bubblelab(?:\.\w+)*)`", DOC.read_text())))


def member(obj: Any, attr: str) -> Any:
    """An attribute, or a dataclass field without a default (not a class attribute)."""
    if hasattr(obj, attr):
        return getattr(obj, attr)
    fields = getattr(obj, "__dataclass_fields__", {})
    if attr in fields:
        return fields[attr]
    raise AttributeError(f"{obj!r} has no attribute or field {attr!r}")


def resolve(name: str) -> Any:
    """Import the longest module prefix of `name`, then follow the rest as attributes."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        module = ".".join(parts[:i])
        try:
            obj = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name is None or not (module + ".").startswith(exc.name + "."):
                raise  # the module exists but something it imports does not
            continue
        for attr in parts[i:]:
            obj = member(obj, attr)
        return obj
    raise ModuleNotFoundError(name)


def test_the_doc_names_the_posts_ideas():
    assert len(NAMES) >= 30, NAMES  # the pattern still finds them


@pytest.mark.parametrize("name", NAMES)
def test_every_name_in_the_doc_resolves(name):
    assert resolve(name) is not None


@pytest.mark.parametrize(
    "name", ["bubblelab.core.pipeline.Pipeline.no_such_method", "bubblelab.no_such_module"]
)
def test_a_name_that_is_gone_fails(name):
    with pytest.raises((AttributeError, ModuleNotFoundError)):
        resolve(name)


ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("core", "engine", "profiling", "costmodel", "runs", "report", "cli")


def test_the_checkout_is_the_package():
    """One path per file: each product folder is bubblelab.<folder> itself (no link, no copy)."""
    import bubblelab

    assert Path(bubblelab.__file__).resolve() == ROOT / "__init__.py"
    for name in PRODUCT:
        module = importlib.import_module(f"bubblelab.{name}")
        assert Path(module.__file__).resolve() == ROOT / name / "__init__.py", name
    links = [p for p in ROOT.rglob("*") if p.is_symlink() and ".venv" not in p.parts]
    assert not [p for p in links if not p.is_relative_to(ROOT / "build")], links


def test_the_product_imports_itself_relatively():
    """Inside the product folders imports are relative, so what a tool reads from the checkout is
    the installed package's import graph (an absolute `bubblelab.` name resolves only through the
    install)."""
    absolute = [
        f"{f.relative_to(ROOT)}:{n}"
        for name in PRODUCT
        for f in (ROOT / name).rglob("*.py")
        for n, line in enumerate(f.read_text().splitlines(), 1)
        if line.lstrip().startswith(("from bubblelab", "import bubblelab"))
    ]
    assert not absolute, absolute


def product_imports() -> dict[str, set[str]]:
    """module -> the product modules it imports, anywhere in its body (a lazy import inside a
    function is an edge too: it still ties the two modules together)."""
    modules = {
        ".".join(f.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): f
        for name in PRODUCT
        for f in (ROOT / name).rglob("*.py")
    }
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom) or not node.level:
                continue
            base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
            target = f"{base}.{node.module}" if node.module else base
            for alias in node.names:  # `from . import x` names a module where one exists
                sub = f"{target}.{alias.name}"
                graph[module].add(sub if sub in modules else target)
    return {m: {t for t in ts if t in modules and t != m} for m, ts in graph.items()}


def test_no_import_circle_in_the_product():
    """Issue #23: the import graph read from the checkout has no circle (a package's __init__ that
    re-exports its own modules is not one: nothing below imports it back)."""
    graph = product_imports()
    circles = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                circles.append(path[path.index(target) :] + [target])
            elif target not in state:
                visit(target, [*path, target])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert len(graph) > 100 and not circles, circles
