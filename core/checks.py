"""Option checks shared by the Python API and the CLI: ranges and finiteness, one rule each.

Every check raises `OptionError` naming the option and the accepted range in one line, so
`EngineConfig(max_num_seqs=0)` and `bubblelab run --max-num-seqs 0` refuse with the same words.
"""

from __future__ import annotations

import math
import numbers

from .errors import OptionError


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


def _range(lo: float | None, hi: float | None, lo_open: bool = False) -> str:
    if lo is not None and hi is not None:
        return f"in {'(' if lo_open else '['}{_num(lo)}, {_num(hi)}]"
    if lo is not None:
        return f"{'>' if lo_open else '>='} {_num(lo)}"
    if hi is not None:
        return f"<= {_num(hi)}"
    return ""


def check_int(name: str, value: object, lo: int | None = None, hi: int | None = None) -> int:
    """An integer (not a bool, not a float) in [lo, hi]."""
    rule = f"must be an integer {_range(lo, hi)}".rstrip()
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise OptionError(name, rule, value)
    v = int(value)
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise OptionError(name, rule, value)
    return v


def check_float(
    name: str,
    value: object,
    lo: float | None = None,
    hi: float | None = None,
    *,
    lo_open: bool = False,
) -> float:
    """A finite number in [lo, hi] (or (lo, hi] with lo_open)."""
    rule = f"must be a finite number {_range(lo, hi, lo_open)}".rstrip()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise OptionError(name, rule, value)
    v = float(value)
    if not math.isfinite(v):
        raise OptionError(name, rule, value)
    if lo is not None and (v <= lo if lo_open else v < lo):
        raise OptionError(name, rule, value)
    if hi is not None and v > hi:
        raise OptionError(name, rule, value)
    return v


def check_choice(name: str, value: object, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise OptionError(name, f"must be one of {', '.join(choices)}", value)
    return str(value)


def parse_ints(name: str, text: str | int | list[int], lo: int, hi: int) -> list[int]:
    """'1,8,32' (or an int, or a list) as distinct integers in [lo, hi], in the order given."""
    rule = f"takes comma-separated integers in [{lo}, {hi}]"
    if isinstance(text, str):
        try:
            # an empty item ('1,,2', '1,2,') is a typo, not a value
            values: list = [int(x) for x in text.split(",")]
        except ValueError:
            raise OptionError(name, rule, text) from None
    elif isinstance(text, list):
        values = list(text)
    else:
        values = [text]
    if not values:
        raise OptionError(name, rule, text)
    for v in values:
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or not lo <= int(v) <= hi:
            raise OptionError(name, rule, text)
    if len(set(values)) != len(values):
        raise OptionError(name, rule + " without repeats", text)
    return [int(v) for v in values]
