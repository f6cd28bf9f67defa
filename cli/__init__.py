"""The `bubblelab` command line: thin typer commands over library functions.

Each command group lives in its own module with a `register(app)` function, so the engine,
profiling and cost-model owners never edit the same file. Command modules import only typer and
rich at the top (torch, pandas and DuckDB inside the commands), so `bubblelab --help` is quick.

Every mistake ends the same way: one line on stderr, exit status 2, no traceback.
"""

from __future__ import annotations

import inspect
import os
import re
import sys
from typing import TYPE_CHECKING

import typer
from typer.core import TyperCommand, TyperGroup, TyperOption

from ..core.errors import BubblelabError, OptionError
from . import clock

if TYPE_CHECKING:  # typer >= 0.29 vendors click; older ones have no typer._click
    from typer._click.core import Context


def _as_flag(option: TyperOption | None) -> TyperOption | None:
    """-h/--help is a flag: typer would print it with a `<bool>` value, as if it took one."""
    if option is not None:
        option.metavar = ""  # as our own flags print: no value shown
    return option


class _Group(TyperGroup):
    def get_help_option(self, ctx: Context) -> TyperOption | None:
        return _as_flag(super().get_help_option(ctx))


class _Command(TyperCommand):
    def get_help_option(self, ctx: Context) -> TyperOption | None:
        return _as_flag(super().get_help_option(ctx))


app = typer.Typer(
    cls=_Group,
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    help="Measure the GPU bubble of an LLM engine and what pipelined decoding wins back.",
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"bubblelab {version('bubblelab')}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False,
        "--version",
        is_eager=True,
        callback=_version,
        metavar="",
        help="Print the version and exit.",
    ),
) -> None:
    """Measure the GPU bubble of an LLM engine and what pipelined decoding wins back."""


def _register_all() -> None:
    from . import analyze, compare, export, predict, run, sweep

    if not app.registered_commands:  # main() may run more than once in a process (tests)
        for module in (run, sweep, analyze, predict, export, compare):
            module.register(app)
        for command in app.registered_commands:
            command.help = command.help or unwrapped(inspect.getdoc(command.callback) or "")
            command.cls = _Command


def unwrapped(doc: str) -> str:
    """A docstring with each paragraph on one line: typer's rich help keeps a paragraph's line
    breaks, so the terminal's own wrapping would leave a word or two stranded on a line."""
    return "\n\n".join(" ".join(p.split()) for p in doc.split("\n\n"))


# Old spellings that still work (users' scripts), hidden from --help: old -> the one name now.
ALIASES = {
    "analyze": {"--output-len": "--output-len-mean"},
    "run-and-profile": {"--depths": "--depth"},
}
# Library fields whose option has another name on the command line.
OPTION_NAMES = {"depths": "depth", "output_len": "output_len_mean"}


def renamed(argv: list[str]) -> list[str]:
    """argv with the command's old option spellings (ALIASES) written the current way."""
    aliases = ALIASES.get(argv[0], {}) if argv else {}
    out: list[str] = []
    for i, arg in enumerate(argv):
        if arg == "--":
            return out + argv[i:]
        flag, eq, value = arg.partition("=")
        out.append(aliases.get(flag, flag) + eq + value)
    return out


def as_flag(option: str) -> str:
    """An option's Python name (`max_model_len`) as the flag a user types (`--max-model-len`)."""
    return "--" + OPTION_NAMES.get(option, option).replace("_", "-")


def as_flags(text: str) -> str:
    """A library message with each option it names in Python's spelling written as its flag."""
    options = {
        name
        for command in app.registered_commands
        for name in inspect.signature(command.callback).parameters  # type: ignore[arg-type]
    }
    words = r"\b[a-z]+(?:_[a-z]+)+\b"  # snake_case: a plain word is left as it is
    return re.sub(words, lambda m: as_flag(m[0]) if m[0] in options else m[0], text)


# What each command takes as arguments: none, trace files, or run directories and files.
NO_INPUTS = ("run", "demo", "run-and-profile")
FILE_INPUTS = ("analyze",)


def json_option_values(argv: list[str]) -> list[str]:
    """`--json` takes an optional value: the next word is its PATH unless that word is another
    option or could be one of the command's inputs (an existing trace or run directory; not a
    .json), in which case `--json` alone means stdout. So `analyze --json a.sqlite` never mistakes
    the trace for the output file, while `run --json /tmp` (run takes no inputs) is refused as a
    directory rather than read as a stray argument (`--json=PATH` is always a path)."""
    command = argv[0] if argv else None
    out: list[str] = []
    for i, arg in enumerate(argv):
        if arg == "--":  # the rest is positional
            return out + argv[i:]
        if arg == "--json":
            after = argv[i + 1] if i + 1 < len(argv) else None
            if after is None or _not_a_json_value(after, command):
                arg = "--json=-"
        out.append(arg)
    return out


def refuse_unusable_words(argv: list[str]) -> None:
    """An empty or blank word ('--out ""', '--domain " "', 'analyze ""') is always a slip: typer
    would read '' as the folder '.' or as the default. Bytes that are not UTF-8 (the shell passes
    them through as surrogates) reach DuckDB and RE2, which cannot take them. Both are refused for
    every option and input alike."""
    for i, word in enumerate(argv):
        flag, eq, value = word.partition("=") if word.startswith("--") else ("", "", word)
        blank = not value.strip() and (eq or not flag)  # (a bare --flag has no value here)
        if not blank and _utf8(word):
            continue
        if not flag and i and argv[i - 1].startswith("--") and "=" not in argv[i - 1]:
            flag = argv[i - 1]  # the option this word is the value of
        what = "is empty" if blank else "is not valid UTF-8"
        raise BubblelabError(f"{flag or 'an input'} {what} ({value!r})")


def _utf8(word: str) -> bool:
    try:
        word.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _not_a_json_value(word: str, command: str | None) -> bool:
    if word.startswith("-") and word != "-":
        return True
    if command in NO_INPUTS or word.lower().endswith(".json"):
        return False
    if command in FILE_INPUTS:
        return os.path.isfile(word)
    return os.path.exists(word)


def wrong_type(e: Exception, argv: list[str]) -> str | None:
    """typer's "Invalid value for '--seed': Input should be a valid integer, unable to parse string
    as an integer" said as every other refusal is, with the value: "--seed takes an integer, got
    'abc'". None where it is some other usage error."""
    kind = re.match(r"Input should be a valid (\w+)", getattr(e, "message", "") or "")
    opts = getattr(getattr(e, "param", None), "opts", None) or []
    value = None
    for i, word in enumerate(argv):  # the last one given is the one typer read
        flag, eq, typed = word.partition("=")
        if flag in opts:
            value = typed if eq else (argv[i + 1] if i + 1 < len(argv) else None)
    if kind is None or value is None:
        return None
    article = "an" if kind[1][0] in "aeiou" else "a"
    return f"{opts[-1]} takes {article} {kind[1]}, got {value!r}"


INTERRUPTED = 130  # 128 + SIGINT, as shells report it


def _fail(message: str, status: int = 2) -> None:
    print(f"bubblelab: error: {' '.join(message.split())}", file=sys.stderr)
    sys.exit(status)


def main(argv: list[str] | None = None) -> None:
    clock.start(from_process_start=argv is None)  # from the shell: the imports count too
    _register_all()
    args = json_option_values(renamed(sys.argv[1:] if argv is None else argv))
    try:
        refuse_unusable_words(args)
        status = app(args=args, prog_name="bubblelab", standalone_mode=False)
    except OptionError as e:  # the option as typed on the command line, and any its rule names
        e.rule = as_flags(e.rule)
        _fail(e.message(as_flag(e.option)))
    except BubblelabError as e:  # user mistakes: one line, no traceback, non-zero exit
        _fail(str(e))
    except typer.TyperException as e:  # usage errors: unknown option, a value of the wrong type
        if type(e).__name__ == "NoArgsIsHelpError":  # typer printed the help making it
            if (text := e.format_message()).strip():
                typer.echo(text)
            sys.exit(2)
        _fail(
            wrong_type(e, args) or (e.format_message() if hasattr(e, "format_message") else str(e))
        )
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except BrokenPipeError:  # the reader went away (`| head`): no one to tell
        sys.exit(1)
    except OSError as e:  # the file system refused where no check could tell (/proc, a full disk)
        _fail(f"{e.filename}: {e.strerror}" if e.filename and e.strerror else str(e))
    except (KeyboardInterrupt, typer.Abort):
        _fail("interrupted", INTERRUPTED)
    if status == INTERRUPTED:  # typer turns Ctrl-C into this status, silently
        _fail("interrupted", INTERRUPTED)
    if isinstance(status, int) and status:  # typer.Exit(code) returned, not raised, here
        sys.exit(status)


if __name__ == "__main__":
    main()
