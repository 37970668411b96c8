"""produce -> Spark reads the topic through the Kafka connector -> Delta -> ledger row in PostgreSQL."""

from __future__ import annotations

from spark_jobs.land import PIPELINE, land
from spark_jobs.offsets import latest_ranges
from spark_jobs.settings import Settings
from tidemark.producer import ProduceSpec, produce


def _rows(spark, settings: Settings, topic: str):
    from pyspark.sql import functions as F

    return spark.read.format("delta").load(settings.table_path("raw_events")).where(F.col("topic") == topic)


def test_land_writes_every_committed_record_once_and_a_replay_changes_nothing(spark, stack, topic, pg) -> None:
    spec = ProduceSpec(count=2000, entities=20, duplicate_rate=0.05, late_rate=0.05, malformed_rate=0.05, seed=3)
    report = produce(stack, spec, topic=topic, partitions=3)
    ranges = latest_ranges(stack, topic)
    assert sum(r.size for r in ranges) == report.committed == 2000

    first = land(spark, stack, ranges)
    assert not first.already_landed
    assert first.records == first.inserted == 2000
    rows = _rows(spark, stack, topic)
    assert rows.count() == 2000
    assert rows.select("partition", "offset").distinct().count() == 2000
    assert rows.where("key IS NULL").count() == report.produced["malformed:null_key"]

    with pg, pg.cursor() as cur:
        cur.execute(
            """SELECT b.records_read, r.kafka_partition, r.start_offset, r.end_offset
               FROM ledger_batches b JOIN ledger_ranges r USING (pipeline, batch_id)
               WHERE b.pipeline = %s AND b.batch_id = %s ORDER BY r.kafka_partition""",
            (PIPELINE, first.batch_id),
        )
        recorded = cur.fetchall()
    assert [(p, s, e) for _, p, s, e in recorded] == [(r.partition, r.start, r.end) for r in sorted(ranges)]
    assert {read for read, *_ in recorded} == {2000}

    versions_before = spark.sql(f"DESCRIBE HISTORY delta.`{stack.table_path('raw_events')}`").count()
    again = land(spark, stack, ranges)
    assert again.already_landed and again.batch_id == first.batch_id
    assert _rows(spark, stack, topic).count() == 2000
    versions_after = spark.sql(f"DESCRIBE HISTORY delta.`{stack.table_path('raw_events')}`").count()
    assert versions_after == versions_before, "a replayed range must not write a new Delta version"


def test_records_of_aborted_transactions_never_land(spark, stack, topic) -> None:
    spec = ProduceSpec(count=1000, entities=10, seed=11)
    report = produce(stack, spec, topic=topic, partitions=2, transaction_size=100, abort_rate=0.5)
    assert report.aborted > 0 and report.committed > 0
    ranges = latest_ranges(stack, topic)
    # Aborted records and transaction markers occupy offsets: the range spans more than it holds.
    assert sum(r.size for r in ranges) > report.committed

    result = land(spark, stack, ranges)
    assert result.records == report.committed
    assert _rows(spark, stack, topic).count() == report.committed
