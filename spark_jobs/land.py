"""Land a frozen Kafka range raw into the Delta table ``raw_events``, recorded in the ledger.

The simplest complete path through tidemark's parts: offsets planned before reading, a bounded
read through Spark's Kafka connector, an idempotent Delta MERGE keyed by the record's coordinates,
and a ledger row in PostgreSQL. Landing the same range again changes nothing. It is also the
Spark baseline the benchmarks compare the full pipeline against.

spark-submit entry point: ``spark-submit spark_jobs/land.py [--topic T]``.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spark_jobs import db
from spark_jobs.kafka_source import read_range
from spark_jobs.offsets import PartitionRange, latest_ranges
from spark_jobs.settings import Settings
from spark_jobs.sinks import delta
from spark_jobs.store import ledger
from spark_jobs.store.lock import transaction_lock

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

PIPELINE = "land"
TABLE = "raw_events"


@dataclass(frozen=True)
class LandReport:
    batch_id: int
    ranges: list[PartitionRange]
    records: int
    inserted: int
    table: str
    already_landed: bool


def land(spark: SparkSession, settings: Settings, ranges: list[PartitionRange]) -> LandReport:
    """Land ``ranges`` into ``raw_events``; a range landed before is a no-op."""
    from delta.tables import DeltaTable

    path = settings.table_path(TABLE)
    with db.transaction(settings.pipeline_dsn) as cur:
        transaction_lock(cur, PIPELINE)
        batch_id = ledger.batch_with_ranges(cur, PIPELINE, ranges)
        if batch_id is not None:
            return LandReport(batch_id, ranges, 0, 0, path, already_landed=True)
        batch_id = ledger.next_batch_id(cur, PIPELINE)

        rows = read_range(spark, settings, ranges).select(
            "topic", "partition", "offset", "timestamp", "timestampType", "key", "value"
        )
        rows = rows.persist()
        records = rows.count()
        if not DeltaTable.isDeltaTable(spark, path):
            rows.limit(0).write.format("delta").partitionBy("partition").save(path)
        delta.insert_new(spark, path, rows)
        metrics = delta.table(spark, path).history(1).select("operationMetrics").first()[0]
        inserted = int(metrics.get("numTargetRowsInserted", 0))
        rows.unpersist()
        ledger.record_batch(cur, PIPELINE, batch_id, ranges, ledger.BatchCounts(read=records, accepted=records))
    return LandReport(batch_id, ranges, records, inserted, path, already_landed=False)


def main(argv: list[str] | None = None) -> None:
    from spark_jobs.spark import build_session

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topic", help="topic to land (default: TIDEMARK_TOPIC or 'events')")
    args = parser.parse_args(argv)
    settings = Settings.from_env()
    ranges = latest_ranges(settings, args.topic or settings.topic)
    spark = build_session(settings, "tidemark-land")
    report = land(spark, settings, ranges)
    print(report)


if __name__ == "__main__":
    main()
