"""The project's exceptions: one type for every user-facing mistake, so the CLI can print one line
and exit non-zero, and one for a broken invariant of the loop, which is a bug and keeps its
traceback."""

from __future__ import annotations


class BubblelabError(Exception):
    """A problem with the user's input or environment, explained in one line."""


class RequestError(BubblelabError):
    """A single request is invalid; the engine rejects it and keeps serving the others."""


class OptionError(BubblelabError):
    """An option outside its accepted range. `option` is its Python name (`max_num_seqs`); the CLI
    shows it as the flag the user typed (`--max-num-seqs`), the Python API as it is."""

    def __init__(self, option: str, rule: str, value: object):
        self.option, self.rule, self.value = option, rule, value
        super().__init__(self.message(option))

    def message(self, name: str) -> str:
        # repr keeps a hostile value on one line (newlines become \n).
        return f"{name} {self.rule}, got {self.value!r}"


class WorkerError(BubblelabError):
    """A tensor-parallel worker process died or stopped answering: the run ends, the engine is
    unusable."""


class InvariantError(AssertionError):
    """A numbered invariant of the loop is broken (I1-I7, listed in core/pipeline.py): a bug in
    bubblelab, never the user's mistake, so not a BubblelabError (the CLI would shorten it to one
    line). Raised explicitly rather than by `assert`, so the checks still run under `python -O`."""

    def __init__(self, number: int, what: str):
        self.number = number
        super().__init__(f"I{number}: {what}")
