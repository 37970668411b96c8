"""First arrival wins: rank each event_id's copies, in the batch and stored, in arrival order.

Pure ``DataFrame -> DataFrame`` functions. The writer materialises :func:`rank`'s answer once and
derives every write and count of a batch from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from spark_jobs.contract import COORDINATES

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

# Arrival order; topic last only to make ties between topics deterministic.
ARRIVAL_ORDER = ("arrival_time", "partition", "offset", "topic")

# What the ranking reads of a stored copy: no write or count needs its payload. A stored row is
# only ever ranked, moved to ``duplicates`` (which holds exactly these columns) or deleted by its
# coordinates, and its entity's sessions recomputed. The lookup reads every row of the dedupe
# horizon, so it leaves the payload out (about 10% of the lookup's time at 1M stored rows).
STORED_COLUMNS = ("topic", "partition", "offset", "arrival_time", "event_id", "entity_id")

# An event_id in Spark's row format, about: a UUID's 36 bytes rounded up to 8, the row's null bits,
# the string's offset and length, and the hash table's entry when broadcast.
ID_ROW_BYTES = 64

# The stored events rows a takeover displaces (to duplicates).
DISPLACED = "loser AND NOT in_batch"
# The rows whose entity's sessions a batch changes: batch records that are (or stay) events rows,
# and the displaced rows (the earlier copy may carry another entity_id).
TOUCHES = f"(in_batch AND NOT loser) OR ({DISPLACED})"

# The columns :func:`rank` adds to the events' own (so no typed column of a contract takes their names).
RANK_COLUMNS = ("in_batch", "rank", "has_stored", "stored_here", "new", "loser")


def rank(
    candidates: DataFrame, events: DataFrame, stored_since_us: int | None = None, broadcast_ids: bool = False
) -> DataFrame:
    """Valid records of a batch and the stored copies of their event_ids, ranked per event_id.

    ``candidates`` and ``events`` have the pipeline's event columns (:data:`~spark_jobs.contract.EVENT_COLUMNS`
    and its contract's typed columns); ``events`` is
    what the ``events`` table holds. ``stored_since_us`` (epoch microseconds) is the dedupe
    horizon's edge: only stored copies that arrived at or after it are looked up, so Delta reads
    only the files written since (``events`` is written in arrival order). ``broadcast_ids``: the
    batch's event_ids are few enough to send to every task, so the lookup filters the stored rows
    where it reads them, instead of shuffling every stored row of the horizon to meet the batch's
    (which grows with the table). Output: those columns plus

    * ``in_batch``: the row comes from the batch (else it is a stored ``events`` row, of which only
      :data:`STORED_COLUMNS` are read: its other columns are null);
    * ``rank``: 1 for the first arrival of the event_id. A replayed record is both stored and in
      the batch with the same coordinates, so both copies share a rank;
    * ``has_stored``: ``events`` holds this event_id already (within the horizon);
    * ``new``: a first arrival that ``events`` does not hold yet (appended, or a takeover when
      ``has_stored``: an earlier copy found after a later one was stored);
    * ``loser``: a later copy that belongs in ``duplicates``: a batch record behind an earlier
      copy, or a stored row that a ``new`` copy displaces. A stored row behind an older stored
      copy stays where it is: both were first arrivals within their own horizon;
    * ``stored_here``: ``events`` holds a row at these coordinates (the row itself, or its replay).
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if stored_since_us is not None:
        events = events.where(F.col("arrival_time") >= F.timestamp_micros(F.lit(stored_since_us)))
    columns = candidates.columns
    batch = candidates.select(*columns, F.lit(True).alias("in_batch"))
    payload = {c: F.lit(None).cast(candidates.schema[c].dataType) for c in columns if c not in STORED_COLUMNS}
    ids = candidates.select("event_id")
    stored = (
        events.select(*STORED_COLUMNS)
        .join(F.broadcast(ids) if broadcast_ids else ids, "event_id", "left_semi")
        .select(*[payload[c].alias(c) if c in payload else c for c in columns], F.lit(False).alias("in_batch"))
    )
    by_event = Window.partitionBy("event_id")
    in_order = by_event.orderBy(*ARRIVAL_ORDER)
    # The copies of one record (stored and replayed) are the peers of a row in arrival order: the
    # coordinates decide the arrival time. So every window shares one sort by (event_id, arrival).
    by_record = in_order.rangeBetween(Window.currentRow, Window.currentRow)
    stored_first = F.max(~F.col("in_batch") & (F.col("rank") == 1)).over(by_event)
    return (
        batch.unionByName(stored)
        .withColumn("rank", F.dense_rank().over(in_order))
        .withColumn("has_stored", F.max(~F.col("in_batch")).over(by_event))
        .withColumn("stored_here", F.max(~F.col("in_batch")).over(by_record))
        .withColumn("new", F.col("in_batch") & (F.col("rank") == 1) & ~stored_first)
        .withColumn("loser", (F.col("rank") > 1) & (~F.col("stored_here") | F.max("new").over(by_event)))
    )


def first_arrivals(ranked: DataFrame) -> DataFrame:
    """New event_ids: rows to append to ``events``."""
    return ranked.where("new AND NOT has_stored").select(*_event_columns(ranked))


def takeovers(ranked: DataFrame) -> DataFrame:
    """Earlier copies of stored event_ids: each replaces the stored rows it displaces (``displaced``)."""
    return ranked.where("new AND has_stored").select(*_event_columns(ranked))


def _event_columns(ranked: DataFrame) -> list[str]:
    return [c for c in ranked.columns if c not in RANK_COLUMNS]


def displaced(ranked: DataFrame) -> DataFrame:
    """The coordinates and arrivals of the stored ``events`` rows that a takeover moves to ``duplicates``."""
    return ranked.where(DISPLACED).select(*COORDINATES, "arrival_time")


def later_copies(ranked: DataFrame) -> DataFrame:
    """Later copies no ``events`` row holds: batch records behind an earlier copy. They go to
    ``duplicates`` after the ``events`` write, so a duplicate is never held while the copy it
    is a duplicate of is in no table (that copy may be gone from Kafka before a retry)."""
    return ranked.where("loser AND NOT stored_here").select(*STORED_COLUMNS)


def displaced_copies(ranked: DataFrame) -> DataFrame:
    """Later copies an ``events`` row holds: stored rows a takeover moves to ``duplicates`` (before
    the ``events`` write removes them), one per record. A record can be in the ranking twice
    (stored in ``events`` and replayed in the batch, both displaced by an earlier copy); it is one
    duplicate, and Delta's MERGE needs a source without two rows for one target row."""
    return (
        ranked.where("loser AND stored_here").select(*STORED_COLUMNS).dropDuplicates(["topic", "partition", "offset"])
    )


def copies_in(duplicates: DataFrame, records: DataFrame) -> DataFrame:
    """``(entity_id, arrival_time)`` of the ``duplicates`` rows that are copies of ``records``' event_ids."""
    return duplicates.join(records.select("event_id"), "event_id", "left_semi").select("entity_id", "arrival_time")


@dataclass(frozen=True)
class DedupeCounts:
    accepted: int  # batch records that are (or stay) an events row
    duplicates: int  # batch records that are a later copy
    first_arrivals: int
    takeovers: int
    losers: int  # duplicates rows the batch implies (batch and stored)
    later_copies: int  # of those, batch records no events row holds (the rest a takeover displaces)
    losers_from: int | None  # offset span of the losers, to bound the duplicates MERGE
    losers_to: int | None
    takeovers_since_us: int | None  # earliest arrival of a takeover (its displaced rows arrived later)
    touched_since_us: int | None  # earliest arrival that changes an entity's events (sessions from there on)
    displaced: list  # (topic, partition, offset, arrival micros) of each stored row a takeover displaces


def aggregates() -> list[Column]:
    """Every count a batch needs (:class:`DedupeCounts`' fields), as aggregates over :func:`rank`'s
    output: observed on the ranking as the writer materialises it (no job of their own)."""
    from pyspark.sql import functions as F

    return [
        F.count_if(F.col("in_batch") & ~F.col("loser")).alias("accepted"),
        F.count_if(F.col("in_batch") & F.col("loser")).alias("duplicates"),
        F.count_if(F.col("new") & ~F.col("has_stored")).alias("first_arrivals"),
        F.count_if(F.col("new") & F.col("has_stored")).alias("takeovers"),
        F.count_if(F.col("loser")).alias("losers"),  # at least one when there are any
        F.count_if(F.col("loser") & ~F.col("stored_here")).alias("later_copies"),
        F.min(F.when(F.col("loser"), F.col("offset"))).alias("losers_from"),
        F.max(F.when(F.col("loser"), F.col("offset"))).alias("losers_to"),
        F.unix_micros(F.min(F.when(F.col("new") & F.col("has_stored"), F.col("arrival_time")))).alias(
            "takeovers_since_us"
        ),
        F.unix_micros(F.min(F.when(F.expr(TOUCHES), F.col("arrival_time")))).alias("touched_since_us"),
        # As few as the batch's takeovers (an earlier copy of a stored event is rare).
        F.collect_list(F.when(F.expr(DISPLACED), F.struct(*COORDINATES, F.unix_micros("arrival_time")))).alias(
            "displaced"
        ),
    ]


def count(ranked: DataFrame) -> DedupeCounts:
    """:func:`aggregates` over a ranking, in a job of its own (for a ranking that is not materialised)."""
    row = ranked.agg(*aggregates()).first()
    assert row is not None  # an aggregate without groups is one row
    return DedupeCounts(**row.asDict())
