"""Which stored sessions a batch changes: the anchor, the events to recompute, the comparison.

A batch can only change the sessions of the entities it touches, and of each such entity only
from its *anchor* on: the earliest of its new records and the start of the first stored session
that a new record could join (one that ended within a gap before it). Everything before the
anchor stays as it is. Pure ``DataFrame -> DataFrame`` functions; the writer materialises them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from spark_jobs.contract import COORDINATES, SESSION_COLUMNS, SessionRules
from spark_jobs.dedupe import DISPLACED, TOUCHES

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

SESSIONIZE_COLUMNS = ("entity_id", "arrival_time", "topic", "partition", "offset", "event_time", "event_id")


def entities(
    ranked: DataFrame,
    sessions: DataFrame,
    rules: SessionRules,
    displaced: DataFrame | None = None,
    since_us: int | None = None,
    continuing: bool = False,
) -> DataFrame:
    """``(entity_id, anchor, partitions, reread, carried)`` for every entity of the batch's valid records.

    ``anchor`` is where the entity's sessions must be recomputed from (:func:`anchors_from`), null
    when the batch changes none of its events (all its records are later copies). Touched are the
    entities of records that are (or stay) ``events`` rows (all of them, not only new ones: a retry
    after a crash between the Delta and the PostgreSQL writes finds its events stored already, yet
    PostgreSQL still needs their sessions) and of stored rows a takeover displaces (the earlier
    copy may carry another entity_id; the old one loses the event). ``ranked`` is
    :func:`spark_jobs.dedupe.rank`'s output, ``sessions`` the stored sessions. ``displaced``
    (``entity_id``, ``arrival_time``) adds rows a takeover displaced before (an earlier attempt of
    the batch committed it, so ``ranked`` no longer holds them). ``partitions`` counts the Kafka
    partitions the entity's batch records came from (a producer check). ``since_us``, at most the
    earliest touched arrival time, lets Delta skip sessions files that ended a gap before it.

    ``continuing`` (``TIDEMARK_CONTINUE_SESSIONS``): an entity whose touching records are all new
    first arrivals (no stored copy, none displaced) arriving after every stored event of it needs
    none of its stored events read again (``reread`` false): its last stored session, if one ended
    within a gap before them, is ``carried`` (started_at, ended_at, first and last event time,
    event_count) and is where its anchor is; :func:`spark_jobs.sessionize.sessionize` continues it.
    Otherwise ``reread`` is true and ``carried`` null, as without ``continuing``.
    """
    from pyspark.sql import functions as F

    rows = ranked.select(
        "entity_id",
        F.when(F.expr(TOUCHES), F.col("arrival_time")).alias("arrival_time"),
        F.when(F.col("in_batch"), F.struct("topic", "partition")).alias("source"),
        F.expr(f"({TOUCHES}) AND NOT new").alias("stored"),  # a touching row events holds (or will lose)
    )
    if displaced is not None:
        rows = rows.unionByName(
            displaced.select(
                "entity_id",
                "arrival_time",
                F.lit(None).cast(rows.schema["source"].dataType).alias("source"),
                F.lit(True).alias("stored"),
            )  # fmt: skip
        )
    per_entity = rows.groupBy("entity_id").agg(
        F.min("arrival_time").alias("first_new"),
        F.count_distinct("source").alias("partitions"),
        F.max("stored").alias("stored"),
    )
    anchored = _anchored(per_entity, sessions, rules, since_us, continuing)
    return anchored.select("entity_id", "anchor", "partitions", "reread", "carried")


def touched(entities_frame: DataFrame) -> DataFrame:
    """``(entity_id, anchor)`` of :func:`entities`' rows whose sessions the batch recomputes."""
    return entities_frame.where("anchor IS NOT NULL").select("entity_id", "anchor")


def carried(entities_frame: DataFrame) -> DataFrame:
    """The stored last sessions :func:`entities` carries, as rows of their columns (for ``sessionize``)."""
    return entities_frame.where("carried IS NOT NULL").select("entity_id", "carried.*")


def anchors_from(times: DataFrame, sessions: DataFrame, rules: SessionRules) -> DataFrame:
    """``(entity_id, anchor)``: where each entity's sessions must be recomputed from, given the
    arrival times (``entity_id``, ``arrival_time``) at which something changed.

    The anchor is the earliest changed time, or the start of the first stored session that ended
    within one gap before it (a change there could join that session). Sessions before the anchor
    cannot depend on what changed.
    """
    from pyspark.sql import functions as F

    per_entity = times.groupBy("entity_id").agg(F.min("arrival_time").alias("first_new"))
    return _anchored(per_entity, sessions, rules).select("entity_id", "anchor")


def _anchored(
    per_entity: DataFrame,
    sessions: DataFrame,
    rules: SessionRules,
    since_us: int | None = None,
    continuing: bool = False,
) -> DataFrame:
    """``per_entity`` (with ``first_new``) plus ``anchor``: ``first_new``, or the start of the first
    stored session that ended within one gap before it; and, with ``continuing`` (``per_entity`` has
    ``stored``), ``reread`` and ``carried`` (:func:`entities`)."""
    from pyspark.sql import functions as F

    gap_us = rules.gap_us
    if since_us is not None:
        # Sessions that ended more than a gap before every change cannot be joined: skip their files.
        sessions = sessions.where(F.col("ended_at") >= F.timestamp_micros(F.lit(since_us - gap_us)))
    # New records cannot change anything that ended more than one gap before them. The batch's
    # side is not broadcast (unlike the dedupe lookup's ids): the time bounds keep the stored side
    # small, and a broadcast's extra job measured slower (docs/design.md, "The dedupe horizon").
    last = F.struct("started_at", "ended_at", "first_event_time", "last_event_time", "event_count")
    open_sessions = (
        sessions.join(per_entity.where("first_new IS NOT NULL").select("entity_id", "first_new"), "entity_id")
        .where(F.unix_micros("ended_at") >= F.unix_micros("first_new") - F.lit(gap_us))
        .groupBy("entity_id")
        .agg(F.min("started_at").alias("open_start"), F.max_by(last, "started_at").alias("last"))
    )
    anchored = per_entity.join(open_sessions, "entity_id", "left")
    recomputed = F.least("first_new", F.coalesce("open_start", "first_new"))
    # Every stored event of the entity arrived at its last session's end at the latest (a session without
    # one within a gap before: a gap before the new records at the latest).
    after_all = F.col("open_start").isNull() | (F.col("first_new") > F.col("last.ended_at"))
    continues = ~F.col("stored") & after_all if continuing else F.lit(False)
    return anchored.select(
        *per_entity.columns,
        F.when(continues, F.coalesce("last.started_at", "first_new")).otherwise(recomputed).alias("anchor"),
        (~continues).alias("reread"),
        F.when(continues, F.col("last")).alias("carried"),
    )


def events_since_anchors(
    events: DataFrame, ranked: DataFrame, anchored: DataFrame, earliest_us: int | None, has_takeovers: bool = True
) -> DataFrame:
    """The touched entities' accepted events from their anchors on, as they will be after the batch.
    ``anchored``: the entities whose stored events are read again; none when ``earliest_us`` is None (the
    batch's new winners alone).

    That is what ``events`` holds, minus the stored rows the batch's takeovers displace, plus the
    batch's new winners, so no write has to happen first. ``earliest_us`` (the smallest anchor in
    epoch microseconds, made a literal) lets Delta skip files written before it: files are written
    in arrival order. It is an integer on purpose: a timestamp collected to the driver comes back as
    a naive datetime in the driver's time zone, which is ambiguous around a daylight-saving change. With
    ``has_takeovers`` False the takeover join is left out (nothing to take over).
    """
    from pyspark.sql import functions as F

    batch = ranked.where("new").select(*SESSIONIZE_COLUMNS)
    if earliest_us is None:
        return batch
    stored = (
        events.where(F.col("arrival_time") >= F.timestamp_micros(F.lit(earliest_us)))
        .join(anchored, "entity_id")
        .where("arrival_time >= anchor")
        .select(*SESSIONIZE_COLUMNS)
    )
    if has_takeovers:
        stored = stored.join(ranked.where(DISPLACED).select(*COORDINATES), list(COORDINATES), "left_anti")
    return stored.select(*SESSIONIZE_COLUMNS).unionByName(batch)


def compare(
    recomputed: DataFrame, sessions: DataFrame, anchored: DataFrame, earliest_us: int | None = None
) -> DataFrame:
    """Recomputed against stored sessions (from the anchors on), one row per session_id with ``op``.

    ``op`` is ``insert`` (a new ID), ``update`` (same ID, other values), ``delete`` (a stored ID no
    longer produced) or ``same``. The other columns are the recomputed values (null for deletes).
    Unchanged rows are not written, so a replay commits nothing. ``earliest_us``, the smallest anchor
    (epoch microseconds), lets Delta skip the files of sessions that started before every anchor.
    """
    from pyspark.sql import functions as F

    if earliest_us is not None:
        sessions = sessions.where(F.col("started_at") >= F.timestamp_micros(F.lit(earliest_us)))
    stored = sessions.join(anchored, "entity_id").where("started_at >= anchor").select(*SESSION_COLUMNS)
    r, s = recomputed.alias("r"), stored.alias("s")
    differs = " OR ".join(f"NOT (r.`{c}` <=> s.`{c}`)" for c in SESSION_COLUMNS[1:])
    return r.join(s, F.col("r.session_id") == F.col("s.session_id"), "full_outer").select(
        F.coalesce("r.session_id", "s.session_id").alias("session_id"),
        *[F.col(f"r.{c}").alias(c) for c in SESSION_COLUMNS[1:]],
        F.expr(
            "CASE WHEN s.session_id IS NULL THEN 'insert' WHEN r.session_id IS NULL THEN 'delete' "
            f"WHEN {differs} THEN 'update' ELSE 'same' END"
        ).alias("op"),
    )


def op_counts(with_ids: bool = False) -> list[Column]:
    """``changed`` (updates and deletes) and ``inserted``: aggregates over :func:`compare`'s rows.
    ``with_ids``: also ``written``, the IDs of every row that is not ``same`` (what an overwrite of
    the named sessions names), so that the write needs no query of its own to learn them. Only for a
    batch's comparison, whose rows are its touched entities' sessions; a full rebuild's are every one."""
    from pyspark.sql import functions as F

    counts = [
        F.count_if(F.col("op").isin("update", "delete")).alias("changed"),
        F.count_if(F.col("op") == "insert").alias("inserted"),
    ]
    if with_ids:
        counts.append(F.collect_list(F.when(F.col("op") != "same", F.col("session_id"))).alias("written"))
    return counts


def surviving(compared: DataFrame) -> DataFrame:
    """The sessions from the anchors on after the batch (what PostgreSQL must hold)."""
    return compared.where("op <> 'delete'").select(*SESSION_COLUMNS)


@dataclass(frozen=True)
class SessionChanges:
    anchors: DataFrame  # (entity_id, anchor): each touched entity's sessions from here on were recomputed
    compared: DataFrame  # recomputed and stored sessions with op: insert, update, delete or same
    changed: int  # rows to update or delete
    inserted: int  # new session IDs
    entities_in_many_partitions: int = 0  # a producer check, counted with the anchors
    earliest_us: int | None = None  # the earliest anchor: no session before it is compared or written
    written_ids: list[str] | None = None  # the IDs of ``compared``'s rows that are not ``same`` (observed)
    continued: int = 0  # entities whose last stored session was continued from its row (no events read again)
