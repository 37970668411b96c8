"""The tidemark app's request side: the scraper's token."""

from __future__ import annotations

from datetime import UTC, datetime

T0 = datetime(2026, 11, 21, 8, tzinfo=UTC)


def test_a_scraper_token_is_only_what_tidemark_metrics_token_says(monkeypatch) -> None:
    from tidemark_airflow.app import scraper_token_matches

    monkeypatch.delenv("TIDEMARK_METRICS_TOKEN", raising=False)
    assert not scraper_token_matches("Bearer ") and not scraper_token_matches("")
    monkeypatch.setenv("TIDEMARK_METRICS_TOKEN", "s3cret-scrape")
    assert scraper_token_matches("Bearer s3cret-scrape")
    assert not scraper_token_matches("Bearer s3cret-scrapex") and not scraper_token_matches("s3cret-scrape")
