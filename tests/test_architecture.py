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
    resolve(name)


@pytest.mark.parametrize(
    "name", ["bubblelab.engine.pipeline.Pipeline.no_such_method", "bubblelab.no_such_module"]
)
def test_a_name_that_is_gone_fails(name):
    with pytest.raises((AttributeError, ModuleNotFoundError)):
        resolve(name)


def test_the_checkout_is_the_installed_namespace():
    """bubblelab/engine, /profiling and /costmodel link to the top-level folders, so tools run from
    the checkout root (python -m bubblelab, lint-imports) see what an install gives."""
    root = Path(__file__).resolve().parents[1]
    for name in ("engine", "profiling", "costmodel"):
        link = root / "bubblelab" / name
        assert link.is_symlink() and link.resolve() == (root / name).resolve(), name
