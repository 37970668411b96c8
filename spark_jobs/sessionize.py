"""Sessions: per entity, in arrival order, split by an inactivity gap and a maximum length.

Arrival order is (Kafka timestamp, partition, offset): it never changes when records are replayed
or when a late record (earlier *event* time) shows up, so neither do session boundaries or IDs.

``session_id`` formula, the same in Python, Spark SQL and PostgreSQL::

    session_id = first 32 hex digits of SHA-256( utf8( entity_id || '|' || started_at_ms ) )

where ``started_at_ms`` is the Kafka timestamp of the session's first record in epoch
milliseconds, written in decimal. See :func:`session_id`, :data:`SESSION_ID_SPARK_SQL` and
:data:`SESSION_ID_POSTGRES_SQL`.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import TYPE_CHECKING

from spark_jobs.contract import SESSION_COLUMNS, SessionRules

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from spark_jobs.spark import FrozenFrames

__all__ = ["SESSION_COLUMNS", "session_id", "sessionize", "split_sessions"]

# Arrival order within an entity: the Kafka timestamp, then the record's coordinates (topic first,
# as dedupe orders them: one lake may hold several topics' records of an entity).
_ORDER = ("arrival_time", "topic", "partition", "offset")

SESSION_ID_SPARK_SQL = "substr(sha2(concat(entity_id, '|', cast(unix_millis(started_at) AS string)), 256), 1, 32)"
SESSION_ID_POSTGRES_SQL = (
    "left(encode(sha256(convert_to(entity_id || '|' || "
    "(extract(epoch FROM started_at) * 1000)::bigint::text, 'UTF8')), 'hex'), 32)"
)


def session_id(entity_id: str, started_at_ms: int) -> str:
    """The stable ID of the session of ``entity_id`` whose first record arrived at ``started_at_ms``."""
    return hashlib.sha256(f"{entity_id}|{started_at_ms}".encode()).hexdigest()[:32]


def split_sessions(arrivals: list[datetime], rules: SessionRules) -> list[int]:
    """Session number of each arrival (``arrivals`` sorted in arrival order): the rules, in Python.

    A new session starts when the gap since the previous record exceeds ``rules.gap``, or when the
    record arrives ``rules.max_length`` or more after the session's first record. This is the
    reference :func:`sessionize` is tested against.
    """
    numbers: list[int] = []
    number = -1
    start: datetime | None = None
    previous: datetime | None = None  # None exactly while start is
    for arrival in arrivals:
        if start is None or previous is None or arrival - previous > rules.gap or arrival - start >= rules.max_length:
            number, start = number + 1, arrival
        numbers.append(number)
        previous = arrival
    return numbers


def sessionize(
    events: DataFrame, rules: SessionRules, frozen: FrozenFrames | None = None, carried: DataFrame | None = None
) -> DataFrame:
    """Accepted events (entity_id, arrival_time, partition, offset, event_time) -> sessions.

    Every event of an entity from the first one given must be present: the caller chooses where
    to start (see ``writer``), sessions before that point are not recomputed. Or the entity's
    stored last session is given in ``carried`` (its :data:`SESSION_COLUMNS`), when every event
    given for the entity arrived after that session's last one: the events continue it, as if its
    own events were given (:func:`continued_rows`). A session's cut depends on the records before
    it only through its start and its last arrival, which the stored row keeps.

    All in Spark SQL, no Python workers: a window over each entity in arrival order cuts *bursts*
    at every gap longer than ``rules.gap``; a burst shorter than ``rules.max_length`` is one
    session. Only a burst that long (rare: a day without a pause; a bot, a device) is cut further,
    by a fold over its sorted arrival times, because each cut depends on the previous one; the
    fold is linear in the burst's length, so a hot key costs about what as many events spread over
    many entities cost (``tidemark bench --stages hotkey``).

    With ``frozen`` (the caller's :class:`~spark_jobs.spark.FrozenFrames`) the burst summaries are
    computed and frozen now, the long ones counted as they are (no job of their own), and the cut of
    long bursts is planned only when there is a long burst.
    Planned without one, it reads every record a second time for nothing: about 1.3 s of the 2 s
    that 100,000 events over 5,000 entities take on 2 cores. Without ``frozen`` the result is
    the same, computed lazily in one plan.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    gap_us, max_us = rules.gap_us, rules.max_length_us
    by_entity = Window.partitionBy("entity_id").orderBy(*_ORDER)
    arrival_us = F.unix_micros("arrival_time")
    bursts = (
        _rows(events, carried)
        .withColumn("us", arrival_us)
        .withColumn("gap_cut", F.coalesce(F.col("us") - F.lag("us").over(by_entity) > gap_us, F.lit(True)))
        .withColumn("burst", F.sum(F.col("gap_cut").cast("long")).over(by_entity))
    )
    # Each burst summarized; the rows are already partitioned by entity, so this adds no shuffle.
    summaries = _summarize(bursts, ["entity_id", "burst"])
    span = F.unix_micros("ended_at") - F.unix_micros("started_at")
    long = span >= max_us
    has_long = True
    if frozen is not None:
        summaries, observed = frozen.freeze_counted(summaries, F.count_if(long).alias("long"))
        has_long = observed["long"] > 0
    long_summaries = summaries.where(long)
    sessions = summaries.where(~long).drop("burst")
    if has_long:
        sessions = sessions.unionByName(_cut_long_bursts(bursts, long_summaries, max_us))
    return (
        sessions.withColumn(
            "duration_seconds",
            (F.unix_micros("ended_at") - F.unix_micros("started_at")).cast("double") / 1_000_000,
        )
        .withColumn("session_id", F.expr(SESSION_ID_SPARK_SQL))
        .select(*SESSION_COLUMNS)
    )


def _rows(events: DataFrame, carried: DataFrame | None) -> DataFrame:
    """The rows to cut: each event counts as one, starting and first in its own session's terms; and the carried
    sessions' rows (:func:`continued_rows`)."""
    from pyspark.sql import functions as F

    rows = events.select(
        "entity_id", *_ORDER, "event_time", F.col("arrival_time").alias("start_time"),
        F.col("event_time").alias("first_time"), F.lit(1).cast("long").alias("weight"),
    )  # fmt: skip
    return rows if carried is None else rows.unionByName(continued_rows(carried))


def continued_rows(carried: DataFrame) -> DataFrame:
    """Stored sessions as one row each that stands for all of its events: it arrives at the session's last
    arrival (so the next record's gap is measured from there) with its last event time, and carries the
    session's start, first event time and count. Its coordinates are null: the events continuing it all
    arrive later, so no tie in arrival order can put one before it."""
    from pyspark.sql import functions as F

    return carried.select(
        "entity_id",
        F.col("ended_at").alias("arrival_time"),
        F.lit(None).cast("string").alias("topic"),
        F.lit(None).cast("int").alias("partition"),
        F.lit(None).cast("long").alias("offset"),
        F.col("last_event_time").alias("event_time"),
        F.col("started_at").alias("start_time"),
        F.col("first_event_time").alias("first_time"),
        F.col("event_count").cast("long").alias("weight"),
    )


def _summarize(rows: DataFrame, keys: list[str]) -> DataFrame:
    """One row per ``keys``: a session's columns but its ID and duration, over ``rows`` in arrival order (a
    continued session's row counts as its events: :func:`continued_rows`)."""
    from pyspark.sql import functions as F

    position = F.struct(*_ORDER)
    return rows.groupBy(*keys).agg(
        F.min("start_time").alias("started_at"),
        F.max("arrival_time").alias("ended_at"),
        F.min_by("first_time", position).alias("first_event_time"),
        F.max_by("event_time", position).alias("last_event_time"),
        F.sum("weight").alias("event_count"),
    )


def _cut_long_bursts(bursts: DataFrame, long_summaries: DataFrame, max_us: int) -> DataFrame:
    """The sessions of the bursts in ``long_summaries`` (each ``max_us`` or longer), cut by the maximum length."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    # Long bursts. Each part starts at the first record that arrives max_length or more after the
    # current part's start, so the starts depend on each other: a fold over the burst's sorted
    # arrival times (microseconds only) that carries the current start and appends a start when it
    # cuts. Linear in the burst's length (the accumulator grows by one element per part). Each
    # record then belongs to the last start at or before it: the starts are added to the rows as
    # markers and counted in arrival order, starts first on a tie. A continued session's row (first
    # in its burst) starts its part at the session's start, not at its own arrival.
    fold = (
        "aggregate(array_sort(collect_list(struct(us, start_us))), "
        "named_struct('start', CAST(NULL AS BIGINT), 'starts', CAST(array() AS ARRAY<BIGINT>)), "
        f"(acc, a) -> IF(acc.start IS NULL OR a.us - acc.start >= {max_us}, "
        "named_struct('start', a.start_us, 'starts', concat(acc.starts, array(a.start_us))), acc), "
        "acc -> acc.starts)"
    )
    long_bursts = long_summaries.select("entity_id", "burst")
    long_records = bursts.join(long_bursts, ["entity_id", "burst"], "left_semi").select(
        "entity_id", "burst", *_ORDER, "event_time", "start_time", "first_time", "weight", "us",
        F.unix_micros("start_time").alias("start_us"), F.lit(0).alias("is_start"),
    )  # fmt: skip
    starts = (
        long_records.groupBy("entity_id", "burst")
        .agg(F.expr(fold).alias("starts"))
        .select("entity_id", "burst", F.explode("starts").alias("us"), F.lit(1).alias("is_start"))
    )
    by_burst = (
        Window.partitionBy("entity_id", "burst")
        .orderBy("us", F.desc("is_start"))
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    long_rows = (
        long_records.unionByName(starts, allowMissingColumns=True)
        .withColumn("part", F.sum("is_start").over(by_burst))
        .where("is_start = 0")
    )
    return _summarize(long_rows, ["entity_id", "burst", "part"]).drop("burst", "part")
