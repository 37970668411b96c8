"""README.md's settings table is the one spark_jobs/settings.py declares, so the two cannot drift apart."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_jobs.settings import settings_table

README = Path(__file__).resolve().parents[2] / "README.md"
START, END = "<!-- settings:start", "<!-- settings:end -->"


def test_the_readme_settings_table_is_generated_from_the_declarations() -> None:
    text = README.read_text()
    assert START in text and END in text, f"README.md's Configuration section lost its {START} / {END} markers"
    between = text[text.index("\n", text.index(START)) : text.index(END)]
    table = settings_table()
    if between.strip() != table.strip():
        # Unprefixed, so it can be pasted as it is.
        print(table)
        pytest.fail(
            f"README.md's settings table differs from spark_jobs/settings.py: replace the lines between its {START} "
            f"... --> and {END} lines with the table under 'Captured stdout call'",
            pytrace=False,
        )
