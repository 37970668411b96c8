"""First arrival wins: rank each event_id's copies, in the batch and stored, in arrival order.

Pure ``DataFrame -> DataFrame`` functions. The writer materialises :func:`rank`'s answer once and
derives every write and count of a batch from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from spark_jobs.contract import EVENT_COLUMNS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

# Arrival order; topic last only to make ties between topics deterministic.
ARRIVAL_ORDER = ("arrival_time", "partition", "offset", "topic")


def rank(candidates: DataFrame, events: DataFrame) -> DataFrame:
    """Valid records of a batch and the stored copies of their event_ids, ranked per event_id.

    ``candidates`` and ``events`` have :data:`~spark_jobs.contract.EVENT_COLUMNS`; ``events`` is
    what the ``events`` table holds. Output: those columns plus

    * ``in_batch``: the row comes from the batch (else it is a stored ``events`` row);
    * ``rank``: 1 for the first arrival of the event_id. A replayed record is both stored and in
      the batch with the same coordinates, so both copies share a rank;
    * ``has_stored``: ``events`` holds this event_id already;
    * ``new``: a first arrival that ``events`` does not hold yet (appended, or a takeover when
      ``has_stored``: an earlier copy found after a later one was stored).
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    batch = candidates.select(*EVENT_COLUMNS, F.lit(True).alias("in_batch"))
    stored = events.join(candidates.select("event_id"), "event_id", "left_semi").select(
        *EVENT_COLUMNS, F.lit(False).alias("in_batch")
    )
    by_event = Window.partitionBy("event_id")
    stored_first = F.max(~F.col("in_batch") & (F.col("rank") == 1)).over(by_event)
    return (
        batch.unionByName(stored)
        .withColumn("rank", F.dense_rank().over(by_event.orderBy(*ARRIVAL_ORDER)))
        .withColumn("has_stored", F.max(~F.col("in_batch")).over(by_event))
        .withColumn("new", F.col("in_batch") & (F.col("rank") == 1) & ~stored_first)
    )


def first_arrivals(ranked: DataFrame) -> DataFrame:
    """New event_ids: rows to append to ``events``."""
    return ranked.where("new AND NOT has_stored").select(*EVENT_COLUMNS)


def takeovers(ranked: DataFrame) -> DataFrame:
    """Earlier copies of stored event_ids: they replace the stored row of their event_id."""
    return ranked.where("new AND has_stored").select(*EVENT_COLUMNS)


def losers(ranked: DataFrame) -> DataFrame:
    """Later copies of an event_id, batch or stored: the ``duplicates`` rows, one per record.

    A record can be in the ranking twice (stored in ``events`` and replayed in the batch, both
    displaced by an earlier copy); it is one duplicate, and Delta's MERGE needs a source without
    two rows for one target row.
    """
    return (
        ranked.where("rank > 1")
        .select("topic", "partition", "offset", "arrival_time", "event_id", "entity_id")
        .dropDuplicates(["topic", "partition", "offset"])
    )


def copies_in(duplicates: DataFrame, records: DataFrame) -> DataFrame:
    """``(entity_id, arrival_time)`` of the ``duplicates`` rows that are copies of ``records``' event_ids."""
    return duplicates.join(records.select("event_id"), "event_id", "left_semi").select("entity_id", "arrival_time")


@dataclass(frozen=True)
class DedupeCounts:
    accepted: int  # batch records that are their event_id's first arrival
    duplicates: int  # batch records that are a later copy
    first_arrivals: int
    takeovers: int
    losers: int  # duplicates rows the batch implies (batch and stored)
    losers_from: int | None  # offset span of the losers, to bound the duplicates MERGE
    losers_to: int | None


def count(ranked: DataFrame) -> DedupeCounts:
    """Every count a batch needs, in one aggregate over :func:`rank`'s output."""
    from pyspark.sql import functions as F

    row = ranked.agg(
        F.count_if(F.col("in_batch") & (F.col("rank") == 1)).alias("accepted"),
        F.count_if(F.col("in_batch") & (F.col("rank") > 1)).alias("duplicates"),
        F.count_if(F.col("new") & ~F.col("has_stored")).alias("first_arrivals"),
        F.count_if(F.col("new") & F.col("has_stored")).alias("takeovers"),
        F.count_if(F.col("rank") > 1).alias("losers"),  # at least one when there are any
        F.min(F.when(F.col("rank") > 1, F.col("offset"))).alias("losers_from"),
        F.max(F.when(F.col("rank") > 1, F.col("offset"))).alias("losers_to"),
    ).first()
    return DedupeCounts(**row.asDict())
