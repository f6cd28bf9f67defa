"""Rewrite the EXPECTED table of tests/test_foreign_fixtures.py from what the analysis says about
the fixtures in traces/foreign/ today (run after replacing a fixture or changing a rule, then
review the diff):

    python -m tests.pin_foreign_fixtures
"""

from __future__ import annotations

import pprint
import subprocess
import sys
from pathlib import Path

from tests.foreign_fixture_values import NAMES, analysed


def main() -> None:
    table = "EXPECTED: dict = {\n"
    for name in NAMES:
        values = pprint.pformat(analysed(name), width=88, sort_dicts=False)
        table += f"    {name!r}: " + "\n    ".join(values.splitlines()) + ",\n"
    table += "}\n"
    test = Path(__file__).parent / "test_foreign_fixtures.py"
    text = test.read_text()
    start = text.index("EXPECTED: dict = ")
    end = text.index("\n\n\n@pytest", start)
    test.write_text(text[:start] + table.rstrip("\n") + text[end:])
    subprocess.run([sys.executable, "-m", "ruff", "format", str(test)], check=True)


if __name__ == "__main__":
    main()
