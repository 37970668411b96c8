"""docs/configuration.md's settings table is the one spark_jobs/settings.py declares, so the two cannot drift apart."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_jobs.settings import settings_table

CONFIGURATION = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
START, END = "<!-- settings:start", "<!-- settings:end -->"


def test_the_settings_table_is_generated_from_the_declarations() -> None:
    text = CONFIGURATION.read_text()
    assert START in text and END in text, f"docs/configuration.md's Settings section lost its {START} / {END} markers"
    between = text[text.index("\n", text.index(START)) : text.index(END)]
    table = settings_table()
    if between.strip() != table.strip():
        # Unprefixed, so it can be pasted as it is.
        print(table)
        pytest.fail(
            f"docs/configuration.md's settings table differs from spark_jobs/settings.py: replace the lines between "
            f"its {START} ... --> and {END} lines with the table under 'Captured stdout call'",
            pytrace=False,
        )
