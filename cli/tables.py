"""Every console table goes through `show`: it fits any width without cutting a number.

Rich squeezes a table that is too wide by truncating its cells with an ellipsis, numbers included
(`3.5…`). `show` renders the table at the console's width first; if any cell lost a character (an
ellipsis appeared that the cells did not hold), the table is printed as records instead: one block
a row, the row's label, then one `column: value` line per cell. Text columns wrap; nothing is ever
forced to a width."""

from __future__ import annotations

import io

from rich.cells import cell_len
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

ELLIPSIS = "…"
EMPTY = ("", "–")


def fixed(value: float | None) -> str:
    """A figure to three decimals (ms, us), or – where it is unknown."""
    return "–" if value is None else f"{value:.3f}"


def percent(share: float | None) -> str:
    """A share in [0, 1] as a percentage to one decimal, or – where it is unknown."""
    return "–" if share is None else f"{100 * share:.1f}"


def show(console: Console, table: Table, *, drop_empty: bool = False) -> None:
    """Print table on console, whole at its width: as drawn, else as records. With drop_empty, a
    column with no value in any row is left out, and a line under the table names it."""
    dropped = _drop_empty_columns(table) if drop_empty else []
    console.print(fitted(table, console.width))
    if dropped:
        console.print(Text(f"(no values, not shown: {', '.join(dropped)})", style="dim"))


def fitted(table: Table, width: int) -> RenderableType:
    """The table if every cell shows whole at width, else its rows as records."""
    for column in table.columns:
        column.no_wrap = False  # text wraps; a number too long for its column shows as cut
    return table if _whole(table, width) else records(table)


def records(table: Table) -> Group:
    """One block a row: its first cell as a heading, then `header: value` per other cell."""
    headers = [_plain(column.header).replace("\n", " ") for column in table.columns]
    rows = list(zip(*(list(column.cells) for column in table.columns), strict=True))
    parts: list[RenderableType] = []
    if table.title:
        parts.append(_text(table.title, "bold"))
    if not table.show_header:  # a key-value table: its first column holds the keys
        block = _grid()
        for row in rows:
            block.add_row(_text(row[0]) + ":", Text(" ").join(_text(v) for v in row[1:]))
        parts.append(block)
    for row in rows if table.show_header else ():
        block = _grid()
        for header, value in list(zip(headers, row, strict=True))[1:]:
            block.add_row(Text(f"{header}:"), _text(value))  # headers are plain text here
        heading = Text(f"{headers[0]}: " if headers[0] else "") + _text(row[0])
        parts.extend([_text(heading, "bold"), block])
    if table.caption:
        parts.append(_text(table.caption, "dim"))
    return Group(*parts)


def _grid() -> Table:
    grid = Table.grid(padding=(0, 1))
    grid.add_column(style="dim", no_wrap=True)
    grid.add_column(overflow="fold")  # a long value breaks across lines, never cut
    return grid


def _whole(table: Table, width: int) -> bool:
    probe = Console(width=width, file=io.StringIO(), color_system=None, legacy_windows=False)
    probe.print(table, crop=False)
    drawn = probe.file.getvalue()  # type: ignore[attr-defined]
    if any(cell_len(line) > width for line in drawn.splitlines()):  # a terminal would crop it
        return False
    held = sum(_plain(c).count(ELLIPSIS) for column in table.columns for c in column.cells)
    held += sum(_plain(column.header).count(ELLIPSIS) for column in table.columns)
    held += sum(_plain(t).count(ELLIPSIS) for t in (table.title, table.caption) if t)
    return drawn.count(ELLIPSIS) <= held


def _drop_empty_columns(table: Table) -> list[str]:
    empty = [
        i
        for i, column in enumerate(table.columns)
        if i and all(_plain(c).strip() in EMPTY for c in column.cells)
    ]
    names = [_plain(table.columns[i].header).replace("\n", " ") for i in empty]
    table.columns = [c for i, c in enumerate(table.columns) if i not in empty]
    return names


def _text(value: object, style: str = "") -> Text:
    text = value.copy() if isinstance(value, Text) else Text.from_markup(str(value))
    if style:
        text.stylize(style)
    return text


def _plain(value: object) -> str:
    return value.plain if isinstance(value, Text) else Text.from_markup(str(value)).plain
