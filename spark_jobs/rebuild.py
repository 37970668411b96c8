"""Stored sessions recomputed from ``events``: every entity's (the session rules changed) or some (a repair).

The same comparison as a batch's (:mod:`spark_jobs.session_changes`) writes only what differs to
Delta, and PostgreSQL gets the entities' full recomputed sessions, in one commit with the writer's
lease (``store.lock.batch_commit``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spark_jobs import session_changes
from spark_jobs.contract import EARLIEST_EVENT_TIME_US, TABLE_SCHEMAS
from spark_jobs.sessionize import sessionize
from spark_jobs.settings import Settings
from spark_jobs.sinks import delta, delta_tables, postgres
from spark_jobs.spark import FrozenFrames
from spark_jobs.store import stored_rules
from spark_jobs.store.lock import WriterLease, batch_commit

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def recompute_sessions(
    spark: SparkSession, settings: Settings, lease: WriterLease, entities: list[str] | None = None
) -> tuple[int, int]:
    """Recompute stored sessions from ``events`` under ``settings.session_rules``, in both sinks (None:
    the pipeline cuts no sessions, so whatever a sink holds goes).

    Every entity's (a change of session rules), or only ``entities``' (a repair), under the
    writer lock's ``lease``. The same comparison as a batch writes only what differs to Delta, and
    PostgreSQL gets the entities' full recomputed sessions, so a row missing or changed in either
    sink is put back; so are the sessions of an entity only PostgreSQL knows (a bad insert, a lake
    restored to an earlier state): a named entity is recomputed from the earliest time either sink
    holds, and a full rebuild removes the sessions of every entity Delta does not know.
    A full rebuild records the new rules with PostgreSQL's sessions, so a crash in between leaves the
    old rules recorded and the rebuild is simply run again.
    Returns (sessions written, sessions removed) in PostgreSQL.
    """
    from pyspark.sql import functions as F

    delta_tables.ensure_tables(spark, settings)
    with FrozenFrames(spark) as frozen:
        events = delta.table(spark, settings.table_path("events")).toDF()
        sessions = delta.table(spark, settings.table_path("sessions")).toDF()
        if entities is not None:
            named = spark.createDataFrame([(e,) for e in entities], "entity_id string")
            events, sessions = (
                events.join(F.broadcast(named), "entity_id"),
                sessions.join(F.broadcast(named), "entity_id"),
            )
            # Every named entity, whatever Delta holds of it: from the earliest time a sink can store.
            anchors = frozen.freeze(
                named.select("entity_id", F.timestamp_micros(F.lit(EARLIEST_EVENT_TIME_US)).alias("anchor"))
            )
        else:
            anchors = frozen.freeze(
                events.select("entity_id", F.col("arrival_time").alias("anchor"))
                .unionByName(sessions.select("entity_id", F.col("started_at").alias("anchor")))
                .groupBy("entity_id")
                .agg(F.min("anchor").alias("anchor"))
            )
        if settings.session_rules is None:  # sessions off: what either sink holds is what it should not
            recomputed = spark.createDataFrame([], TABLE_SCHEMAS["sessions"])
        else:
            recomputed = sessionize(events.select(*session_changes.SESSIONIZE_COLUMNS), settings.session_rules, frozen)
        compared, ops = frozen.freeze_counted(
            session_changes.compare(recomputed, sessions, anchors), *session_changes.op_counts()
        )
        with batch_commit(settings, lease) as cur:
            delta.apply_session_changes(
                spark,
                settings.table_path("sessions"),
                compared,
                ops["changed"],
                ops["inserted"],
            )
            anchor_rows, session_rows = postgres.pulled(session_changes.surviving(compared), anchors)
            written = postgres.upsert_sessions(cur, session_rows, anchor_rows, every_entity=entities is None)
            if entities is None:
                stored_rules.record_session_rules(cur, settings.session_rules, "rebuild")
        return written
