"""What Delta runs by itself for the work no batch can do without, counted (the bench's ``floor`` stage).

A steady-state batch reads ``events`` (is a record stored already?), appends to it idempotently
(``txnAppId``), reads ``sessions`` (where do the touched entities' sessions start?) and replaces the
rows of the sessions it changed (``replaceWhere`` on their IDs, deletion vectors), because Delta's
``sessions`` holds the same rows as PostgreSQL's after every run. Each operation here runs on two
small tables made like tidemark's (``events`` append-only, ``sessions`` with deletion vectors and
the change feed), each time on the version the operation before wrote, as in a batch. The first
round creates what a first batch creates (not counted); the second is counted.

The Spark SQL executions of a read are counted without the read's own query (one), so each
figure is Delta's work. The floor of a batch is their sum, plus the streaming query and one query
of tidemark's own (the pull to PostgreSQL): a lower bound for any writer that keeps these four
operations, whatever else it fuses. The alternatives beside them are what Delta charges for the
other ways of doing one of the four.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from spark_jobs.jvm import newest_query_ids
from spark_jobs.sinks.delta import WriteId, append, dml_write_id
from spark_jobs.sinks.delta_tables import TABLE_PROPERTIES, create_table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

EVENTS = "event_id string, entity_id string, arrived_at timestamp"
SESSIONS = "session_id string, entity_id string, started_at timestamp, events long"
# The queries a batch runs that are not Delta's: the streaming query, and at least one of its own.
OWN_QUERIES = 2
# The operations a batch keeps (their sum is the floor), and the other ways of doing one of them.
FLOOR_OPERATIONS = (
    "events: filtered read of its new version",
    "events: idempotent append (txnAppId)",
    "sessions: filtered read of its new version",
    "sessions: replace the changed sessions (replaceWhere on IDs, txnAppId)",
)
ALTERNATIVES = (
    "events: insert-only MERGE instead of the read and the append",
    "sessions: append instead of the replace (no update in place)",
    "sessions: MERGE instead of the replace",
)


def delta_floor(spark: SparkSession, root: Path) -> dict[str, int]:
    """Delta's executions for each operation of :data:`FLOOR_OPERATIONS` and :data:`ALTERNATIVES`
    (counted in the second round), and ``floor``: the four operations' sum plus :data:`OWN_QUERIES`."""
    tables = FloorTables.create(spark, root)
    tables.batch(1)  # a first batch: the tables' first states, the first deletion vectors
    counts = tables.batch(2)
    counts["floor"] = sum(counts[name] for name in FLOOR_OPERATIONS) + OWN_QUERIES
    return counts


@dataclass(frozen=True)
class FloorTables:
    """The two small tables the floor is counted on, made like tidemark's ``events`` and ``sessions``."""

    spark: SparkSession
    events: str
    sessions: str

    @classmethod
    def create(cls, spark: SparkSession, root: Path) -> FloorTables:
        """The tables under ``root``: 200 events of 20 entities, and a session of each entity."""
        events, sessions = str(root / "events"), str(root / "sessions")
        create_table(spark, events, EVENTS, TABLE_PROPERTIES.get("events"))
        create_table(spark, sessions, SESSIONS, TABLE_PROPERTIES.get("sessions"))
        spark.range(200).selectExpr(
            "cast(id as string) event_id", "cast(id % 20 as string) entity_id", "timestamp_seconds(id * 60) arrived_at"
        ).write.format("delta").mode("append").save(events)
        spark.range(20).selectExpr(
            "cast(id as string) session_id",
            "cast(id as string) entity_id",
            "timestamp_seconds(id * 60) started_at",
            "10L events",
        ).write.format("delta").mode("append").save(sessions)
        return cls(spark, events, sessions)

    def executions(self, work: Callable[[], object], own: int = 0) -> int:
        """The Spark SQL executions ``work`` ran, less ``own`` of its own."""
        before, _ = newest_query_ids(self.spark)
        work()
        after, _ = newest_query_ids(self.spark)
        return after - before - own

    def batch(self, version: int) -> dict[str, int]:
        """Each operation of a batch ``version``, on the tables' versions the one before wrote: its executions."""
        new = self.spark.range(1_000 * version, 1_000 * version + 10).selectExpr(
            "cast(id as string) event_id", "'3' entity_id", "timestamp_seconds(id * 60) arrived_at"
        )
        changed = self.spark.createDataFrame(
            [(str(i), str(i), None, 10 + version) for i in (3, 4)], SESSIONS
        )  # two sessions of the touched entities, updated
        inserted = self.spark.createDataFrame([(f"n{version}", "9", None, 1)], SESSIONS)
        read = self.spark.read.format("delta").load
        events, sessions = self.events, self.sessions
        return {
            FLOOR_OPERATIONS[0]: self.executions(lambda: read(events).where("entity_id = '3'").collect(), own=1),
            FLOOR_OPERATIONS[1]: self.executions(lambda: append(new, events, WriteId("append", version))),
            FLOOR_OPERATIONS[2]: self.executions(
                lambda: read(sessions).where("entity_id IN ('3', '4')").collect(), own=1
            ),
            FLOOR_OPERATIONS[3]: self.executions(lambda: self.replace(changed, "'3', '4'", version)),
            ALTERNATIVES[0]: self.executions(lambda: self.insert_only_merge(new, version)),
            ALTERNATIVES[1]: self.executions(lambda: append(inserted, sessions, WriteId("insert", version))),
            ALTERNATIVES[2]: self.executions(lambda: self.merge_sessions(changed)),
        }

    def replace(self, rows: DataFrame, ids: str, version: int) -> None:
        """Replace the sessions ``ids`` with ``rows`` (replaceWhere on their IDs, txnAppId)."""
        rows.write.format("delta").mode("overwrite").option("replaceWhere", f"session_id IN ({ids})").option(
            "txnAppId", "replace"
        ).option("txnVersion", version).save(self.sessions)

    def insert_only_merge(self, new: DataFrame, version: int) -> None:
        """Insert the ``new`` events no stored one has the ID of, in one MERGE."""
        from delta.tables import DeltaTable

        with dml_write_id(self.spark, WriteId("merge", version)):
            DeltaTable.forPath(self.spark, self.events).alias("t").merge(
                new.alias("s"), "t.event_id = s.event_id"
            ).whenNotMatchedInsertAll().execute()

    def merge_sessions(self, changed: DataFrame) -> None:
        """Update the ``changed`` sessions in place (or insert them), in one MERGE."""
        from delta.tables import DeltaTable

        DeltaTable.forPath(self.spark, self.sessions).alias("t").merge(
            changed.alias("s"), "t.session_id = s.session_id"
        ).whenMatchedUpdateAll().whenNotMatchedInsertAll().execute()
