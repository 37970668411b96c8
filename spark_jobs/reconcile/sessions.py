"""Reconcile's sessions: Delta against PostgreSQL, and Delta against a recompute from ``events``.

Delta and PostgreSQL are compared by count and checksum per bucket of entities; only the buckets
that differ are compared row by row, to name the sessions. The recompute covers the entities of
the checked ranges and of every commit since the previous run, each from its anchor on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spark_jobs.offsets import merged_spans
from spark_jobs.sinks import delta, postgres
from spark_jobs.sinks.delta_log import union

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pyspark.sql import DataFrame

    from spark_jobs.contract import SessionRules
    from spark_jobs.offsets import PartitionRange
    from spark_jobs.sinks.delta_log import Touched
    from spark_jobs.spark import FrozenFrames

SESSION_BUCKET = postgres.SESSION_BUCKET  # 256 buckets, the same text in Spark SQL and PostgreSQL


def sessions_differing_from_postgres(
    sessions: DataFrame, delta_buckets: dict[str, tuple[int, int]], cur
) -> list[tuple[str, str]]:
    """(entity_id, session_id) of the sessions that differ between Delta and PostgreSQL.

    Per-bucket counts and checksums first (Delta's are given; one aggregate in PostgreSQL); only
    the buckets that differ are compared row by row.
    """
    postgres_buckets = postgres.session_buckets(cur)
    differing = sorted(b for b in delta_buckets.keys() | postgres_buckets.keys()
                       if delta_buckets.get(b) != postgres_buckets.get(b))  # fmt: skip
    if not differing:
        return []
    in_delta = {
        row["session_id"]: (row["entity_id"], row["h"])
        for row in sessions.where(f"{SESSION_BUCKET} IN ({', '.join(repr(b) for b in differing)})")
        .selectExpr("session_id", "entity_id", f"substr(sha2({delta.SESSION_ROW_TEXT}, 256), 1, 15) AS h")
        .toLocalIterator()
    }
    in_postgres = postgres.session_row_hashes(cur, differing)
    pairs = set()
    for session_id in in_delta.keys() | in_postgres.keys():
        a, b = in_delta.get(session_id), in_postgres.get(session_id)
        if a != b:
            pairs |= {(side[0], session_id) for side in (a, b) if side is not None}
    return sorted(pairs)


def _delta_buckets(sessions: DataFrame) -> dict[str, tuple[int, int]]:
    """Per bucket of entities: (rows, checksum) of a sessions frame."""
    from pyspark.sql import functions as F

    rows = (
        sessions.withColumn("b", F.expr(SESSION_BUCKET))
        .groupBy("b")
        .agg(F.count("*").alias("n"), F.expr(delta.SESSIONS_CHECKSUM).alias("c"))
        .collect()
    )
    return {row["b"]: (int(row["n"]), int(row["c"])) for row in rows}


def sessions_buckets(
    sessions: DataFrame, previous: dict[str, tuple[int, int]] | None, touched: Touched
) -> dict[str, tuple[int, int]]:
    """Delta sessions' per-bucket (rows, checksum) at this run's version.

    From the previous run's buckets plus the rows of the files added since, minus those of the
    files removed (both checksums are sums over rows), when that is exact; else by reading the table.
    """
    if previous is None or touched.sessions_added is None or touched.sessions_removed is None:
        return _delta_buckets(sessions)
    buckets = dict(previous)
    for sign, frame in ((1, touched.sessions_added), (-1, touched.sessions_removed)):
        for b, (n, c) in _delta_buckets(frame).items():
            n0, c0 = buckets.get(b, (0, 0))
            buckets[b] = (n0 + sign * n, c0 + sign * c)
    return {b: v for b, v in buckets.items() if v != (0, 0)}


def anchors_to_recompute(
    tables: dict[str, DataFrame],
    ranges: list[PartitionRange],
    touched: Touched,
    rules: SessionRules,
    entities: Sequence[str] = (),
) -> DataFrame:
    """``(entity_id, anchor)``: whose sessions to recompute from events, and from when.

    The entities with events in the checked ranges (from those events' arrival), and those in any
    events or sessions file a commit touched since the previous run (from the rows' times); on a
    first run, every entity from its first event. Sessions before an anchor were checked before.
    ``entities`` (those of open findings) are recomputed from their first event.
    """
    from pyspark.sql import functions as F

    from spark_jobs.session_changes import anchors_from

    events = tables["events"]
    frames = []
    if ranges:
        in_ranges = events.alias("t").where(delta.range_filter(merged_spans(ranges), "t"))
        frames.append(in_ranges.select("entity_id", "arrival_time"))
    if entities:
        frames.append(events.where(F.col("entity_id").isin(list(entities))).select("entity_id", "arrival_time"))
    if touched.times is not None:
        frames.append(touched.times)
    if not frames:
        return events.sparkSession.createDataFrame([], "entity_id string, anchor timestamp")
    times = union(frames[1:], frames[0]).where(F.col("entity_id").isNotNull())
    return anchors_from(times, tables["sessions"], rules)


def sessions_differing_from_events(
    events: DataFrame, sessions: DataFrame, anchored: DataFrame, rules: SessionRules, frozen: FrozenFrames
) -> list[tuple[str, str]]:
    """(entity_id, session_id) where Delta ``sessions`` differ from a recompute of the ``anchored``
    entities' events, each from its anchor on (files before the earliest anchor are skipped)."""
    from pyspark.sql import functions as F

    from spark_jobs.session_changes import SESSIONIZE_COLUMNS
    from spark_jobs.sessionize import sessionize

    row = anchored.agg(F.min(F.unix_micros("anchor"))).first()
    assert row is not None  # an aggregate without groups is one row
    earliest = row[0]
    named = F.broadcast(anchored)
    since = events.where(F.col("arrival_time") >= F.timestamp_micros(F.lit(earliest)))
    recomputed = sessionize(
        since.join(named, "entity_id").where("arrival_time >= anchor").select(*SESSIONIZE_COLUMNS), rules, frozen
    )
    stored = (
        sessions.where(F.col("started_at") >= F.timestamp_micros(F.lit(earliest)))
        .join(named, "entity_id")
        .where("started_at >= anchor")
    )
    r = recomputed.selectExpr("session_id", "entity_id", f"{delta.SESSION_ROW_TEXT} AS row").alias("r")
    s = stored.selectExpr("session_id", "entity_id", f"{delta.SESSION_ROW_TEXT} AS row").alias("s")
    differing = (
        r.join(s, F.col("r.session_id") == F.col("s.session_id"), "full_outer")
        .where("NOT (r.row <=> s.row)")
        .select(
            F.coalesce("r.entity_id", "s.entity_id").alias("entity_id"),
            F.coalesce("r.session_id", "s.session_id").alias("session_id"),
        )  # fmt: skip
        .collect()
    )
    return sorted((row["entity_id"], row["session_id"]) for row in differing)
