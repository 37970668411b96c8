"""Producer requirements, checked on every batch instead of assumed.

Sessions are cut by Kafka arrival time per entity, which is exact only when

* every record of an entity goes to **one partition** (the key is the entity_id and the producer
  hashes keys as Java's client does: murmur2), so an entity's records reach tidemark in arrival
  order; and
* the topic stamps arrival time itself (``message.timestamp.type=LogAppendTime``), so timestamps
  never go back within a partition.

When either breaks, a later batch can bring an entity's records that arrived earlier, and the
sessions already published for it are deleted and replaced with new IDs. Each batch counts how
often that could happen; the counts go into its ledger row, the run prints a warning, and the
ingest DAG alerts above ``TIDEMARK_PRODUCER_ALERT_THRESHOLD`` (README, "Producer requirements").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

LOG_APPEND_TIME = 1  # Spark's Kafka source: timestampType 0 is CreateTime, 1 LogAppendTime


@dataclass(frozen=True)
class ProducerChecks:
    entities_in_many_partitions: int = 0  # entities whose valid records in the batch span partitions
    not_log_append_time: int = 0  # records stamped by the producer (CreateTime), not the broker
    time_went_back: int = 0  # records whose arrival time is before the one at the previous offset

    @property
    def broken(self) -> int:
        return self.entities_in_many_partitions + self.not_log_append_time + self.time_went_back

    def describe(self) -> str:
        parts = [
            (self.entities_in_many_partitions, "entities in more than one partition"),
            (self.not_log_append_time, "records not stamped with LogAppendTime"),
            (self.time_went_back, "records whose arrival time went back within their partition"),
        ]
        return ", ".join(f"{n:,} {what}" for n, what in parts if n)


def with_previous_arrival(parsed: DataFrame) -> DataFrame:
    """``parsed`` (``validation.parse_records`` output) plus ``previous_arrival``, the arrival time at
    the previous offset of the record's partition, for :func:`aggregates`. A source without
    timestamp types (``timestamp_type``) has nothing to check."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if "timestamp_type" not in parsed.columns:
        return parsed.withColumn("timestamp_type", F.lit(LOG_APPEND_TIME)).withColumn(
            "previous_arrival", F.lit(None).cast("timestamp")
        )
    previous = F.lag("arrival_time").over(Window.partitionBy("topic", "partition").orderBy("offset"))
    return parsed.withColumn("previous_arrival", previous)


def aggregates() -> list[Column]:
    """``not_log_append_time`` and ``time_went_back`` over :func:`with_previous_arrival`'s rows: every
    record of the batch, those a table holds already too."""
    from pyspark.sql import functions as F

    return [
        F.count(F.when(F.col("timestamp_type") != LOG_APPEND_TIME, 1)).alias("not_log_append_time"),
        F.count(F.when(F.col("arrival_time") < F.col("previous_arrival"), 1)).alias("time_went_back"),
    ]
