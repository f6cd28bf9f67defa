"""The `bubblelab` command line: thin typer commands over library functions.

Each command group lives in its own module with a `register(app)` function, so the engine,
profiling and cost-model owners never edit the same file.
"""

from __future__ import annotations

import sys

import typer

from bubblelab.errors import BubblelabError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Measure the GPU bubble of an LLM engine and what pipelined decoding wins back.",
)


def _register_all() -> None:
    from bubblelab.cli import analyze, export, predict, run, sweep

    for module in (run, sweep, analyze, predict, export):
        module.register(app)


def main() -> None:
    _register_all()
    try:
        app()
    except BubblelabError as e:  # user mistakes: one line, no traceback, non-zero exit
        print(f"bubblelab: error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
