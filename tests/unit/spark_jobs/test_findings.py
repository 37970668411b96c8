"""Reconciliation's pure logic: findings, gaps, the report, the rotation, the repair plan."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from spark_jobs.findings import (
    CHANGED,
    Gap,
    LedgerEntry,
    RangeCheck,
    Report,
    SessionDifference,
    SessionsSummary,
    find_gaps,
)
from spark_jobs.offsets import PartitionRange
from spark_jobs.reconcile import LedgerRange, Verified, log_version, merged_spans, rotation_share
from spark_jobs.repair import _batches, plan_repair
from spark_jobs.settings import Settings


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


def check(sink: int, kafka: int | None, **kw: object) -> RangeCheck:
    return RangeCheck("ingest:events", 3, "events", 1, 100, 200, sink_records=sink, kafka_records=kafka, **kw)


def test_a_new_range_is_compared_with_kafka_and_an_expired_one_is_not_a_mismatch() -> None:
    assert check(100, 100).outcome == "ok"
    assert check(98, 100).outcome == "missing"
    assert check(101, 100).outcome == "extra"
    expired = check(40, None, low_watermark=150)
    assert expired.outcome == "expired" and not expired.matches
    assert "removed offsets [100, 150) before the range was verified" in expired.describe()
    assert "Not a mismatch" in expired.describe()


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


def test_the_repair_plan_rereads_named_ranges_clears_extra_ones_and_recomputes_named_entities() -> None:
    findings = [
        {"kind": "range", "outcome": "missing", "topic": "t", "partition": 0, "start": 0, "end": 10},
        {"kind": "range", "outcome": "missing", "topic": "t", "partition": 0, "start": 10, "end": 20},
        {"kind": "range", "outcome": "extra", "topic": "t", "partition": 1, "start": 5, "end": 9},
        {"kind": "range", "outcome": "expired", "topic": "t", "partition": 2, "start": 0, "end": 9},
        {"kind": "gap", "topic": "t", "partition": 2, "start": 50, "end": 60},
        {"kind": "sessions_events", "entity_count": 2, "session_count": 3, "sessions": {"a": ["1"], "b": ["2", "3"]}},
    ]
    plan = plan_repair("r1", findings)
    assert plan.reread == [PartitionRange("t", 0, 0, 20), PartitionRange("t", 1, 5, 9), PartitionRange("t", 2, 50, 60)]
    assert plan.clear == [PartitionRange("t", 1, 5, 9)]
    assert plan.expired == [PartitionRange("t", 2, 0, 9)]
    assert plan.entities == ["a", "b"]
    truncated = {"kind": "sessions_sinks", "entity_count": 20_000, "session_count": 20_000, "sessions": {"a": ["1"]}}
    assert plan_repair("r2", [truncated]).entities is None  # more than were named: recompute all
    assert plan_repair("r3", [{"kind": "sessions_totals"}]).entities is None


def test_a_repair_batch_holds_at_most_one_range_per_partition() -> None:
    ranges = [PartitionRange("t", 0, 0, 5), PartitionRange("t", 0, 9, 12), PartitionRange("t", 1, 3, 4)]
    assert _batches(ranges) == [[ranges[0], ranges[2]], [ranges[1]]]
    assert merged_spans([PartitionRange("t", 0, 5, 9), PartitionRange("t", 0, 0, 5), PartitionRange("t", 1, 0, 1)]) == [
        PartitionRange("t", 0, 0, 9),
        PartitionRange("t", 1, 0, 1),
    ]


def test_the_rotation_rechecks_a_share_of_verified_ranges_and_everything_overdue(tmp_path) -> None:
    now = datetime(2026, 11, 21, 12, tzinfo=UTC)
    settings = Settings.from_env({"TIDEMARK_HOME": str(tmp_path), "TIDEMARK_REVERIFY_DAYS": "7"})
    ranges = [LedgerRange("ingest:t", i, PartitionRange("t", 0, i * 10, i * 10 + 10)) for i in range(14)]
    checked = [now - timedelta(days=1, hours=i) for i in range(14)]
    verified = {(r.pipeline, r.batch_id, "t", 0): Verified(10, 1, at) for r, at in zip(ranges, checked, strict=True)}
    # Runs every hour: 14 ranges over 7 days is less than one per run, nothing is due yet.
    assert rotation_share(ranges, verified, now - timedelta(hours=1), now, settings) == []
    # A day since the last run: a seventh of them, the least recently checked first.
    assert rotation_share(ranges, verified, now - timedelta(days=1), now, settings) == [ranges[13], ranges[12]]
    # Whatever the share, a range not re-checked for a whole period is due.
    stale = dict(verified) | {("ingest:t", 4, "t", 0): Verified(10, 1, now - timedelta(days=8))}
    assert rotation_share(ranges, stale, now - timedelta(hours=1), now, settings) == [ranges[4]]


def test_a_local_delta_log_gives_its_version_without_spark(tmp_path) -> None:
    assert log_version(str(tmp_path / "missing")) == -1
    log = tmp_path / "events" / "_delta_log"
    log.mkdir(parents=True)
    for name in ("00000000000000000000.json", "00000000000000000001.json", "00000000000000000001.checkpoint.parquet"):
        (log / name).write_text("{}")
    assert log_version(str(tmp_path / "events")) == 1
    assert log_version(f"file://{tmp_path / 'events'}") == 1
    assert log_version("s3a://bucket/lake/events") is None


def test_a_run_too_far_behind_kafka_is_lagging_not_a_mismatch() -> None:
    from spark_jobs.findings import Lag

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
