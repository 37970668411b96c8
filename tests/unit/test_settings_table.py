"""docs/configuration.md's settings table is the one spark_jobs/settings.py declares, and its table of pipeline
options the one spark_jobs/pipelines.py declares, so that neither can drift apart from its declarations."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_jobs.settings_tables import options_table, settings_table

CONFIGURATION = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
START, END = "<!-- settings:start", "<!-- settings:end -->"
OPTIONS_START, OPTIONS_END = "<!-- pipeline-options:start", "<!-- pipeline-options:end -->"


def assert_generated(start: str, end: str, table: str, declared_in: str, section: str) -> None:
    """The lines between ``start`` and ``end`` of docs/configuration.md are ``table``; else it is printed."""
    text = CONFIGURATION.read_text()
    assert start in text and end in text, f"docs/configuration.md's {section} section lost its {start} / {end} markers"
    between = text[text.index("\n", text.index(start)) : text.index(end)]
    if between.strip() != table.strip():
        # Unprefixed, so it can be pasted as it is.
        print(table)
        pytest.fail(
            f"docs/configuration.md's {section} table differs from {declared_in}: replace the lines between "
            f"its {start} ... --> and {end} lines with the table under 'Captured stdout call'",
            pytrace=False,
        )


def test_the_settings_table_is_generated_from_the_declarations() -> None:
    assert_generated(START, END, settings_table(), "spark_jobs/settings.py", "settings")


def test_the_pipeline_options_table_is_generated_from_the_declarations() -> None:
    assert_generated(OPTIONS_START, OPTIONS_END, options_table(), "spark_jobs/pipelines.py", "pipeline options")
