"""The page's templates escape what they are given: text from the database or a producer (an alert, a
sample's key and value, a quarantine reason, a finding's note) cannot become markup."""

from __future__ import annotations

from datetime import UTC, datetime

from tidemark_airflow.templating import render
from tidemark_airflow.view import render_quarantine, render_repair

HOSTILE = "<script>alert('x')</script>"


def test_a_value_is_escaped_and_a_rendered_part_is_not_escaped_twice() -> None:
    page = render("file_problems.html", file=HOSTILE, problems=[HOSTILE])
    assert "<script>" not in page and "&lt;script&gt;" in page
    framed = render("page.html")  # an empty page: only what the base template itself holds
    assert framed.startswith("<!doctype html>") and framed.endswith("</body></html>")


def test_a_repair_error_and_a_quarantine_sample_from_a_producer_stay_text() -> None:
    class Sample:
        def describe(self) -> str:
            return f"events p0 offset 1: key {HOSTILE}"

    class Total:
        reason, records, first_at, last_at = (
            HOSTILE,
            1,
            datetime(2026, 1, 1, tzinfo=UTC),
            datetime(2026, 1, 1, tzinfo=UTC),
        )

    for page in (render_repair(HOSTILE, [HOSTILE], HOSTILE), render_quarantine([Total()], {HOSTILE: [Sample()]}, [])):
        assert "<script>" not in page and page.count("&lt;script&gt;") >= 2, page
