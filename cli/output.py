"""Where a command's output goes: `--json -` puts the JSON alone on stdout and everything meant for
people (tables, progress) on stderr; `--json PATH` is checked before any work and written
atomically after it."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from ..core.files import check_output_path, write_atomic

STDOUT = "-"
SCHEMA = 1  # the version of every command's JSON (docs/cli-json.md); a change of shape bumps it


def check_json_dest(dest: str | None) -> str | None:
    """The --json destination, refused now if it could not be written later."""
    if dest is None or dest == STDOUT:
        return dest
    check_output_path(Path(dest), "--json")
    return dest


def console_for(dest: str | None, **options: Any) -> Console:
    """People's output: stderr when the JSON takes stdout."""
    return Console(stderr=dest == STDOUT, **options)


def cell(value: object, limit: int = 60) -> Text:
    """Trace-derived text for a table cell or a line: never markup, one line (control characters
    shown escaped), at most `limit` characters, and printable whatever its bytes were."""
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(value))
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")  # lone surrogates
    return Text(text if len(text) <= limit else text[: limit - 1] + "…")


def json_text(obj: Any) -> str:
    """Strict JSON: NaN and infinities (not JSON) become null."""
    return json.dumps(_finite(obj), indent=1, default=str, allow_nan=False)


def emit_json(dest: str | None, obj: Any) -> Path | None:
    """Write obj to dest (a path, or - for stdout); return the path written, if any."""
    if dest is None:
        return None
    if dest == STDOUT:
        sys.stdout.write(json_text(obj) + "\n")
        sys.stdout.flush()
        return None
    return write_atomic(Path(dest), json_text(obj) + "\n")


def emit_and_say(console: Console, dest: str | None, obj: Any) -> bool:
    """emit_json, saying on the console where the file went; True when the JSON took stdout (then
    nothing else belongs there)."""
    if (written := emit_json(dest, obj)) is not None:
        console.print(f"wrote {written}", markup=False)
    return dest == STDOUT


def records(table: Any) -> list[dict]:
    """A DataFrame as JSON rows (pandas' own conversion: NaN as null, timestamps as text)."""
    return json.loads(table.to_json(orient="records")) if len(table) else []


def _finite(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj
