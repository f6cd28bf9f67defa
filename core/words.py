"""How a count reads in a sentence: the one place that makes '1 pair' and '3 pairs' agree."""

from __future__ import annotations


def counted(n: int | float, noun: str) -> str:
    """'1 step', '3 steps', '0 steps', '32 streams' of 32.0, '31.5 streams' of a median."""
    number = str(int(n)) if float(n).is_integer() else f"{n:g}"
    return f"{number} {noun}{'' if n == 1 else 's'}"
