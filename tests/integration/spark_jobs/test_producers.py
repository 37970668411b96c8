"""Producer requirements are checked per batch (spark_jobs.store.producers), against real Kafka and sinks."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from spark_jobs import ingest
from spark_jobs.offsets import ensure_topic
from spark_jobs.store.producers import ProducerChecks
from tests.integration.spark_jobs.checks import assert_offset_coverage, query, send_to


def test_a_batch_counts_what_broke_the_producer_requirements_and_warns(spark, run) -> None:
    settings, prefix = run
    ensure_topic(settings, settings.topic, 2, "CreateTime")
    t = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    records = [
        (0, f"{prefix}a", f"{prefix}1", t),
        (0, f"{prefix}a", f"{prefix}2", t + timedelta(minutes=5)),
        (0, f"{prefix}b", f"{prefix}3", t + timedelta(minutes=1)),  # went back within partition 0
        (1, f"{prefix}a", f"{prefix}4", t + timedelta(minutes=6)),  # entity a in a second partition
        (1, f"{prefix}c", f"{prefix}5", t + timedelta(minutes=7)),
    ]
    send_to(settings, settings.topic, records)

    [result] = ingest.run_scheduled(spark, settings)
    expected = ProducerChecks(entities_in_many_partitions=1, not_log_append_time=5, time_went_back=1)
    assert result.producer == expected
    assert query(
        settings,
        """SELECT entities_in_many_partitions, not_log_append_time, time_went_back FROM ledger_batches
           WHERE pipeline = %s""",
        f"ingest:{settings.topic}",
    ) == [(1, 5, 1)]
    text = ingest.describe([result])
    assert "WARNING: the producers broke tidemark's requirements: 1 entities in more than one partition" in text
    assert "1 records whose arrival time went back" in text
    assert_offset_coverage(spark, settings, len(records))  # a warning, never a lost record


def test_a_log_append_time_topic_with_keyed_records_breaks_nothing(spark, run) -> None:
    from tidemark.producer import ProduceSpec, produce

    settings, prefix = run
    produce(settings, ProduceSpec(count=300, entities=20, seed=8, id_prefix=prefix), topic=settings.topic, partitions=3)
    results = ingest.run_scheduled(spark, settings)
    assert [r.producer for r in results] == [ProducerChecks()]
    assert "WARNING" not in ingest.describe(results)
