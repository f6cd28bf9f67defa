"""docs/architecture.md stays true: every dotted `bubblelab.` name in backticks there resolves."""

from __future__ import annotations

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
