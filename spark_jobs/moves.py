"""Takeovers in flight: the stored rows a batch's takeovers move from ``events`` to ``duplicates``.

A takeover changes two tables, which Delta cannot commit together: the displaced rows go into
``duplicates`` first, then the ``events`` MERGE inserts their earlier copies and deletes them (the
order that never leaves a row in neither table). In between, both tables hold the displaced rows.
The next attempt of the batch ranks the earlier copies again and finishes the move, unless
retention removed an earlier copy before any table held it: then nothing displaces the stored row
any more, it stays the ``events`` row, and the copy the crashed attempt put in ``duplicates`` has
to go. Only that attempt knew which rows it moved, so it writes them down before its first Delta
write (:func:`record`), in the lake beside the tables, where a PostgreSQL restore cannot take them
away. The next attempt of the same batch reads them (:func:`recorded`) and deletes from
``duplicates`` those both tables still hold that its own plan does not move (:func:`unfinished`).
The note is removed once the batch is in the ledger (:func:`forget`).
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING

from spark_jobs import jvm
from spark_jobs.contract import COORDINATES
from spark_jobs.offsets import PartitionRange
from spark_jobs.settings import Settings
from spark_jobs.sinks import delta

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

Moved = tuple[str, int, int, int]  # topic, partition, offset, arrival (epoch microseconds) of a displaced row
MOVED_SCHEMA = "topic string, partition int, offset long, arrival_us long"


def _path(settings: Settings, batch: str) -> str:
    digest = hashlib.sha256(batch.encode()).hexdigest()[:32]
    return f"{settings.table_path('_tidemark')}/moves/{digest}.json"  # in the pipeline's folder of the lake


def recorded(spark: SparkSession, settings: Settings, batch: str) -> list[Moved]:
    """The rows earlier attempts of ``batch`` (:func:`spark_jobs.batch_writes.batch_key`) set out to move."""
    text = jvm.read_text(spark, _path(settings, batch))
    return [] if text is None else [tuple(row) for row in json.loads(text)["rows"]]


def record(spark: SparkSession, settings: Settings, batch: str, rows: list[Moved]) -> None:
    """Write down ``rows`` as moved by ``batch`` (before its first Delta write; replaces the note)."""
    jvm.write_text(spark, _path(settings, batch), json.dumps({"batch": batch, "rows": sorted(rows)}))


def forget(spark: SparkSession, settings: Settings, batch: str) -> None:
    jvm.delete(spark, _path(settings, batch))


def unfinished(spark: SparkSession, settings: Settings, rows: list[Moved], moving: set[Moved]) -> list[Moved]:
    """Of ``rows`` (an earlier attempt's moves), those ``events`` and ``duplicates`` both hold and
    the plan does not move itself (``moving``): their ``duplicates`` copies are left over.

    One small job, only for a batch an earlier attempt took over in: the few rows are looked up by
    their coordinates, each table read from the earliest of their arrivals on.
    """
    from pyspark.sql import functions as F

    left = [row for row in rows if row not in moving]
    if not left:
        return []
    since = F.timestamp_micros(F.lit(min(row[3] for row in left)))

    def holding(name: str) -> DataFrame:
        stored = delta.table(spark, settings.table_path(name)).toDF()
        return stored.where(F.col("arrival_time") >= since).select(*COORDINATES)

    candidates = spark.createDataFrame(left, MOVED_SCHEMA)
    both = candidates.join(holding("events"), list(COORDINATES), "left_semi").join(
        holding("duplicates"), list(COORDINATES), "left_semi"
    )
    return sorted(tuple(row) for row in both.collect())


def rows_of(spark: SparkSession, rows: list[Moved]) -> DataFrame:
    """``rows`` as a frame with :data:`~spark_jobs.contract.COORDINATES`, for a MERGE by coordinates."""
    return spark.createDataFrame(rows, MOVED_SCHEMA).select(*COORDINATES)


def moved_spans(rows: list[Moved]) -> list[PartitionRange]:
    """Per partition, first to last offset of the stored rows a takeover moves: the verified ranges
    there get a new baseline."""
    spans: dict[tuple[str, int], tuple[int, int]] = {}
    for topic, partition, offset, _ in rows:
        first, last = spans.get((topic, partition), (offset, offset))
        spans[(topic, partition)] = (min(first, offset), max(last, offset))
    return [
        PartitionRange(topic, partition, first, last + 1) for (topic, partition), (first, last) in sorted(spans.items())
    ]
