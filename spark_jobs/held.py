"""The records of a batch's ranges that a record table holds already: a replay's, or an earlier attempt's.

A record a table holds stays where it is: the batch counts it where it is, and ranks the ``events`` rows
among it again (``batch_plan``). Records reach the tables only from batches that record their attempt
first, so PostgreSQL can tell a scheduled batch that its ranges hold nothing (the usual case), and the
batch then reads no Delta table for it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from spark_jobs.contract import COORDINATES, RECORD_TABLES
from spark_jobs.offsets import PartitionRange
from spark_jobs.settings import Settings
from spark_jobs.sinks import delta
from spark_jobs.spark import FrozenFrames
from spark_jobs.store import ledger

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

Cursor = Any  # a psycopg2 cursor


def held_records(
    spark: SparkSession,
    settings: Settings,
    frozen: FrozenFrames,
    ranges: list[PartitionRange],
    on_ledger: Callable[[Callable[[Cursor], Any]], Any],
    *,
    scheduled: bool,
    created_lake: bool,
    readmitting: DataFrame | None,
) -> tuple[DataFrame | None, dict[str, int]]:
    """``(topic, partition, offset, table)`` of the records in ``ranges`` a record table holds
    already, one row per record (:func:`spark_jobs.sinks.delta.owners`), frozen (one snapshot: its counts and the
    records it excludes agree, even while a writer that lost its lease still commits), and how
    many each table holds, observed as it is frozen; (None, {}) when none can be held.

    For a scheduled batch Delta is searched only when PostgreSQL says a table may hold some: a
    range overlaps an attempt or ledger range, or starts below its topic's write floor. Records
    reach the tables only from batches that record their attempt first, so a batch that overlaps
    none of these (the usual scheduled batch) holds nothing and reads no Delta table. Backfills
    and repairs always search.
    """
    from pyspark.sql import functions as F

    if not any(r.end > r.start for r in ranges):
        return None, {}
    if scheduled:
        topic, lake = ranges[0].topic, settings.lake_root

        def may_hold(cur: Cursor) -> bool:
            floor = ledger.write_floor(cur, lake, topic)
            if floor is None:  # the first batch of this topic in this lake since attempts are recorded
                floor = 0 if created_lake else delta.offset_floor(spark, settings, topic)
                ledger.set_write_floor(cur, lake, topic, floor)
            return ledger.may_hold(cur, ranges, floor)

        if not on_ledger(may_hold):
            return None, {}
    held = delta.held(spark, settings, ranges)
    if readmitting is not None:  # in quarantine, but what the batch brings back from there
        leaving = readmitting.select(*COORDINATES).withColumn("table", F.lit("quarantine"))
        held = held.join(leaving, [*COORDINATES, "table"], "left_anti")
    records, counts = frozen.freeze_counted(
        delta.owners(held), *[F.count_if(F.col("table") == name).alias(name) for name in RECORD_TABLES]
    )
    return records, {name: n for name, n in counts.items() if n}
