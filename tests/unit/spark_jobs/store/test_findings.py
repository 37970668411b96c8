"""Reconciliation's findings, pure: range checks, gaps, session differences, lag and the report."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from spark_jobs.store.findings import (
    CHANGED,
    Gap,
    LedgerEntry,
    RangeCheck,
    SessionDifference,
    SessionsSummary,
    find_gaps,
)
from spark_jobs.store.report import Report


def entry(pipeline: str, batch: int, start: int, end: int, partition: int = 0) -> LedgerEntry:
    return LedgerEntry(pipeline, batch, "events", partition, start, end)


def test_consecutive_scheduled_batches_that_tile_have_no_gap() -> None:
    assert find_gaps([entry("ingest:events", 0, 0, 10), entry("ingest:events", 1, 10, 25)]) == []


def test_a_hole_between_scheduled_batches_is_a_gap_unless_a_backfill_covers_it() -> None:
    entries = [entry("ingest:events", 0, 0, 10), entry("ingest:events", 2, 40, 50), entry("ingest:events", 3, 50, 60)]
    assert find_gaps(entries) == [Gap("ingest:events", "events", 0, 10, 40, 0, 2)]
    partly = [*entries, entry("backfill:events", 0, 10, 30)]
    assert find_gaps(partly) == [Gap("ingest:events", "events", 0, 10, 40, 0, 2)]
    covered = [*partly, entry("repair:events", 1, 25, 45)]
    assert find_gaps(covered) == []


def test_backfill_pipelines_and_other_partitions_are_not_compared_with_each_other() -> None:
    entries = [
        entry("backfill:events", 0, 0, 10),
        entry("backfill:events", 1, 50, 60),
        entry("ingest:events", 0, 0, 10, partition=0),
        entry("ingest:events", 0, 100, 110, partition=1),
        entry("ingest:events", 1, 10, 20, partition=0),
        entry("ingest:events", 1, 110, 120, partition=1),
    ]
    assert find_gaps(entries) == []


def check(sink: int, kafka: int | None, **kw: Any) -> RangeCheck:
    return RangeCheck("ingest:events", 3, "events", 1, 100, 200, sink_records=sink, kafka_records=kafka, **kw)


def test_a_new_range_is_compared_with_kafka_and_an_expired_one_is_not_a_mismatch() -> None:
    assert check(100, 100).outcome == "ok"
    assert check(98, 100).outcome == "missing"
    assert check(101, 100).outcome == "extra"
    expired = check(40, None, low_watermark=150)
    assert expired.outcome == "expired" and not expired.matches
    assert "removed offsets [100, 150) before the range was verified" in expired.describe()
    assert "Not a mismatch" in expired.describe()


def test_an_offset_held_twice_is_extra_even_when_a_missing_one_makes_the_count_right() -> None:
    doubled_and_missing = check(100, 100, sink_offsets=99)
    assert doubled_and_missing.outcome == "extra" and not doubled_and_missing.matches
    assert doubled_and_missing.describe().endswith(": 1 rows beyond one per offset, 1 offsets held by none")
    assert check(101, 100, sink_offsets=100).describe().endswith(": 1 rows beyond one per offset")
    assert check(100, 100, sink_offsets=100).outcome == "ok"


def test_a_verified_range_is_compared_with_its_verification_count_and_checksum() -> None:
    def recheck(sink: int, checksum: int) -> RangeCheck:
        return RangeCheck(
            "ingest:events", 3, "events", 1, 100, 200, sink_records=sink, sink_checksum=checksum,
            reason=CHANGED, verified_records=100, verified_checksum=77,
        )  # fmt: skip

    assert recheck(100, 77).outcome == "ok"
    assert recheck(99, 70).outcome == "missing"
    assert recheck(100, 78).outcome == "changed"
    assert "verified with 100 rows, re-checked (changed)" in recheck(99, 70).describe()


def test_the_report_names_ranges_sessions_and_the_repair_and_keeps_expired_ranges_apart() -> None:
    checks = [check(98, 100), check(10, 10), check(5, None, low_watermark=120)]
    differ = SessionDifference.of("sinks", [("e1", "s1"), ("e1", "s2"), ("e2", "s3")])
    report = Report("r1", checks, [], SessionsSummary(5, 123), SessionsSummary(4, 99), [differ], entities_checked=7)
    assert not report.ok and report.status == "mismatch"
    assert [c.outcome for c in report.mismatched] == ["missing"] and len(report.expired) == 1
    text = report.summary()
    assert "topic events partition 1 offsets [100, 200) (ingest:events batch 3)" in text
    assert "Kafka has 100 committed records, the sinks hold 98" in text and "2 missing" in text
    assert "Delta and PostgreSQL differ in 3 sessions of 2 entities: entity 'e1': s1, s2; entity 'e2': s3" in text
    assert "expired: topic events partition 1" in text
    assert "tidemark repair --run-id r1" in text
    kinds = [f["kind"] for f in report.findings()]
    assert kinds == ["range", "range", "sessions_sinks"]
    alert = report.alert()
    assert alert.count("\n") <= 7 and "tidemark repair --run-id r1" in alert

    only_expired = Report("r2", checks[1:], [], SessionsSummary(5, 1), SessionsSummary(5, 1))
    assert only_expired.ok and "tidemark repair" not in only_expired.summary()
    assert "1 expired" in only_expired.headline()


def test_a_long_list_of_differing_sessions_is_bounded_in_the_text_but_counted() -> None:
    pairs = [(f"entity-{i:03}", f"session-{i}") for i in range(40)]
    differ = SessionDifference.of("events", pairs)
    assert differ.entity_count == 40 and differ.session_count == 40 and len(differ.entities) == 40
    text = differ.describe()
    assert "entity 'entity-009'" in text and "entity 'entity-010'" not in text and "and 30 more entities" in text


def test_a_run_too_far_behind_kafka_is_lagging_not_a_mismatch() -> None:
    from spark_jobs.store.findings import Lag

    fresh = Lag("events", 0, high_watermark=100, processed_to=100, oldest_unprocessed=None, behind_seconds=0)
    late = Lag("events", 1, 500, 200, datetime(2026, 11, 21, 9, tzinfo=UTC), behind_seconds=2 * 3600)
    summary = SessionsSummary(1, 1)
    report = Report("r", [], [], summary, summary, lags=[fresh, late], lag_alert_seconds=3600)
    assert report.consistent and not report.ok and report.status == "lagging"
    assert report.lagging == [late] and late.behind_records == 300
    expected = "lag: topic events partition 1: 300 offsets [200, 500) not processed yet, the oldest arrived 120 min ago"
    assert expected in report.alert()
    assert "tidemark repair" not in report.alert() and [f["kind"] for f in report.findings()] == ["lag"]
    assert Report("r", [], [], summary, summary, lags=[fresh, late], lag_alert_seconds=3 * 3600).ok
    assert "behind Kafka by 300 records (the oldest waiting 120 min)" in report.headline()


def test_the_headline_counts_the_records_waiting_even_when_they_arrived_a_moment_ago() -> None:
    from spark_jobs.store.findings import Lag

    summary = SessionsSummary(1, 1)
    just_now = Lag("events", 0, 2_100, 100, datetime(2026, 11, 21, 9, tzinfo=UTC), behind_seconds=12)
    report = Report("r", [], [], summary, summary, lags=[just_now])
    assert "behind Kafka by 2,000 records (the oldest waiting under a minute)" in report.headline()
    caught_up = Lag("events", 0, 100, 100, None, behind_seconds=0)
    assert "caught up with Kafka" in Report("r", [], [], summary, summary, lags=[caught_up]).headline()
