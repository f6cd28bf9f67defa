"""Rewrite tests/foreign_fixtures_expected.json, the pins of tests/test_foreign_fixtures.py, from
what the analysis says about the fixtures in traces/foreign/ today (run after replacing a fixture or
changing a rule, then review the diff):

    python -m tests.pin_foreign_fixtures
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.foreign_fixture_values import NAMES, analysed


def main() -> None:
    pins = {name: analysed(name) for name in NAMES}
    path = Path(__file__).parent / "foreign_fixtures_expected.json"
    path.write_text(json.dumps(pins, indent=1) + "\n")


if __name__ == "__main__":
    main()
