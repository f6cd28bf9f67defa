"""Every command, every option, hostile values (issue #28): empty and blank words, empty list items,
repeats, signs, non-finite numbers, markup, unicode, control characters and bytes that are not
UTF-8. Each is refused in one line with exit 2 and nothing written, or accepted: the command's work
begins (run and the sweep are stopped there) or it finishes. Never a traceback.

The options are read from the commands themselves, so a new option is covered without a new line
here."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer.core
import typer.main

from bubblelab.cli import _register_all, app, main
from bubblelab.engine import llm_engine
from bubblelab.runs import sweep
from tests.cli_helpers import ROOT

TRACE = str(ROOT / "traces" / "nsys-h200-probe.sqlite")
VALUES = ["", " ", "\t", "1,,2", ",", "1,1", "-1", "nan", "1e999", "[bold]x[/]", "é",
          "\u202e", "x\ny", "\udcff", ":smile: [link=file:///etc]z"]  # fmt: skip
# Arguments that make each command valid, so the value under test decides.
BASE = {
    "run": [],
    "demo": ["--out", "new"],
    "run-and-profile": ["--out", "new"],
    "analyze": [TRACE],
    "predict": ["--blog", "--n-boot", "20"],
    "report": ["--demo", "demo", "--n-boot", "20"],
    "export": [TRACE, "--out", "exported"],
    "compare": [TRACE, TRACE],
}


class Begun(Exception):
    """The command's work began: the value was accepted."""


def _begin(*args, **kwargs):
    raise Begun


def _options(command: str) -> list[str]:
    _register_all()
    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    params = group.commands[command].params
    return [p.opts[0] for p in params if isinstance(p, typer.core.TyperOption) and not p.is_flag]


def _snapshot(root: Path) -> dict[str, int]:
    return {str(p): p.stat().st_mtime_ns for p in root.rglob("*")}


def test_every_command_is_covered():
    _register_all()
    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup) and sorted(group.commands) == sorted(BASE)


@pytest.mark.parametrize("command", sorted(BASE))
def test_every_option_refuses_in_one_line_or_accepts(command, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(llm_engine.LLMEngine, "__init__", _begin)
    monkeypatch.setattr(sweep, "run_sweep", _begin)
    failures = []
    for i, (option, value) in enumerate((o, v) for o in _options(command) for v in VALUES):
        here = tmp_path / str(i)  # a fresh folder each: what one call leaves cannot serve another
        here.mkdir()
        monkeypatch.chdir(here)
        before = _snapshot(here)
        argv = [command, *BASE[command], option, value]
        try:
            main(argv)
            code: int | str = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        except Begun:
            code = "begun"
        except Exception as e:  # a traceback the user would see
            code = f"{type(e).__name__}: {e}"
        out, err = capsys.readouterr()
        lines = err.splitlines()
        refused = code == 2 and len(lines) == 1 and lines[0].startswith("bubblelab: error: ")
        if code in (0, "begun") and "Traceback" not in out + err:
            continue
        if not (refused and "Traceback" not in out and _snapshot(here) == before):
            failures.append(f"{argv!r}: {code}, {err[-300:]!r}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["analyze", TRACE, "--domain", ""], "--domain is empty"),
        (["analyze", TRACE, "--step-range="], "--step-range is empty"),
        (["export", TRACE, "--out", ""], "--out is empty"),
        (["analyze", ""], "an input is empty"),
        (["analyze", TRACE, "--catalog", "c\udcff.duckdb"], "--catalog is not valid UTF-8"),
        (["run", "--model", " "], "--model is empty"),
    ],
)
def test_an_empty_or_undecodable_word_is_named(argv, named, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    out, err = capsys.readouterr()
    assert exit_.value.code == 2 and out == ""
    assert err.startswith(f"bubblelab: error: {named} (") and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []
