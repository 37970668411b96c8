"""The Delta side: idempotent writes, what the tables hold of a batch's ranges, versions and fingerprints.

Every write here is idempotent on its own: inserts skip coordinates a table holds, MERGEs set
absolute values. So a batch whose writes fail part way is completed by running it again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spark_jobs import jvm
from spark_jobs.contract import COORDINATES, RECORD_TABLES, SESSION_COLUMNS, TABLE_SCHEMAS
from spark_jobs.offsets import PartitionRange
from spark_jobs.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


log = logging.getLogger(__name__)

# One text form of a session row, the same as sinks.postgres.SESSION_ROW_TEXT (UTC, microseconds,
# both stores' unit: a sub-millisecond difference between the sinks is a difference), and an
# order-independent checksum over it: the sum of the first 60 bits of sha256.
SESSION_ROW_TEXT = (
    "concat_ws('|', session_id, entity_id, date_format(started_at, 'yyyy-MM-dd HH:mm:ss.SSSSSS'), "
    "date_format(ended_at, 'yyyy-MM-dd HH:mm:ss.SSSSSS'), date_format(first_event_time, 'yyyy-MM-dd HH:mm:ss.SSSSSS'), "
    "date_format(last_event_time, 'yyyy-MM-dd HH:mm:ss.SSSSSS'), event_count, "
    "cast(duration_seconds AS decimal(18,6)))"
)
SESSIONS_CHECKSUM = (
    f"coalesce(sum(cast(conv(substr(sha2({SESSION_ROW_TEXT}, 256), 1, 15), 16, 10) AS decimal(38,0))), 0)"
)


@dataclass(frozen=True)
class WriteId:
    """A write's Delta transaction identifier (``txnAppId``, ``txnVersion``): a table that committed a
    write with this id skips every later write with it, whoever makes it. A writer that lost its
    lease and writes on after another run wrote the same batch therefore adds nothing twice; nor
    does the retry of a batch whose attempt record a restored PostgreSQL lost."""

    app_id: str
    version: int


# Delta reads a MERGE's or DELETE's transaction identifier from the session's SQL configuration,
# which every thread of the session shares: one such write at a time sets it.
_TXN_CONF = ("spark.databricks.delta.write.txnAppId", "spark.databricks.delta.write.txnVersion")
_txn_conf_lock = threading.Lock()


@contextmanager
def dml_write_id(spark: SparkSession, write_id: WriteId | None) -> Iterator[None]:
    if write_id is None:
        yield
        return
    with _txn_conf_lock:
        spark.conf.set(_TXN_CONF[0], write_id.app_id)
        spark.conf.set(_TXN_CONF[1], str(write_id.version))
        try:
            yield
        finally:
            for key in _TXN_CONF:
                spark.conf.unset(key)


def table(spark: SparkSession, path: str):  # -> DeltaTable
    from delta.tables import DeltaTable

    return DeltaTable.forPath(spark, path)


# A MERGE's match of a stored row (``t``) and a source row (``s``) of the same Kafka record.
SAME_RECORD = " AND ".join(f"t.`{c}` = s.`{c}`" for c in COORDINATES)


def insert_new(
    spark: SparkSession, path: str, rows: DataFrame, bound: str | None = None, write_id: WriteId | None = None
) -> None:
    """Insert the ``rows`` whose coordinates the table at ``path`` does not hold yet.

    An insert-only MERGE (Delta's dedupe-on-write): one pass, and no commit at all when every row
    is stored already, so a retry adds nothing twice. ``bound``, a predicate on ``t`` (the stored
    rows) that holds for all of ``rows``, lets Delta compare only the files that can match.
    """
    condition = f"({bound}) AND {SAME_RECORD}" if bound else SAME_RECORD
    with dml_write_id(spark, write_id):
        table(spark, path).alias("t").merge(rows.alias("s"), condition).whenNotMatchedInsertAll().execute()


# Rows per data file a batch aims at: a batch's few quarantined records or duplicates make one
# small file per table, not one per Spark partition (months of batches would make tens of thousands).
ROWS_PER_FILE = 100_000


def in_files(rows: DataFrame, count: int) -> DataFrame:
    """``rows`` (``count`` of them) in one Spark partition, so one data file, per ROWS_PER_FILE rows."""
    return rows.coalesce(1 + count // ROWS_PER_FILE)


def append(rows: DataFrame, path: str, write_id: WriteId | None = None) -> None:
    """Append ``rows``: a blind append, which needs no table state but ``write_id``'s.

    Only for rows the table cannot hold yet; rows it may hold go through :func:`insert_new`.
    """
    writer = rows.write.format("delta").mode("append")
    if write_id is not None:
        writer = writer.option("txnAppId", write_id.app_id).option("txnVersion", write_id.version)
    writer.save(path)


def within(df: DataFrame, ranges: list[PartitionRange]) -> DataFrame:
    """The rows of a record table's ``df`` whose coordinates fall in ``ranges``."""
    return df.alias("t").where(range_filter(ranges, "t"))


def held(spark: SparkSession, settings: Settings, ranges: list[PartitionRange]) -> DataFrame:
    """``(topic, partition, offset, table)`` of every record in ``ranges`` that a record table holds."""
    from pyspark.sql import functions as F

    frames = [
        within(table(spark, settings.table_path(name)).toDF(), ranges).select(*COORDINATES, F.lit(name).alias("table"))
        for name in RECORD_TABLES
    ]
    return frames[0].unionByName(frames[1]).unionByName(frames[2])


def offset_floor(spark: SparkSession, settings: Settings, topic: str) -> int:
    """One more than the largest offset of ``topic`` any record table holds (0 when none): no
    record at or above it is stored. One scan of the offset columns, run once per lake and topic."""
    from pyspark.sql import functions as F

    frames = [table(spark, settings.table_path(name)).toDF() for name in RECORD_TABLES]
    union = frames[0].select("topic", "offset")
    for frame in frames[1:]:
        union = union.unionByName(frame.select("topic", "offset"))
    largest = union.where(F.col("topic") == topic).agg(F.max("offset")).first()[0]
    return 0 if largest is None else int(largest) + 1


def take_over(
    spark: SparkSession,
    path: str,
    winners: DataFrame,
    displaced: DataFrame,
    since_us: int,
    write_id: WriteId | None = None,
) -> None:
    """Takeovers in one commit: the ``displaced`` stored rows (their coordinates) are deleted and the
    ``winners`` (their earlier copies) inserted. Running it again changes nothing.

    ``since_us`` (epoch microseconds), at most the earliest arrival of a winner (each displaced row
    arrived after its winner), lets Delta rewrite only files written since.
    """
    from pyspark.sql import functions as F

    source = winners.withColumn("op", F.lit("insert")).unionByName(
        displaced.withColumn("op", F.lit("delete")), allowMissingColumns=True
    )
    with dml_write_id(spark, write_id):
        (
            table(spark, path)
            .alias("t")
            .merge(source.alias("s"), f"t.arrival_time >= timestamp_micros({int(since_us)}) AND {SAME_RECORD}")
            .whenMatchedDelete(condition="s.op = 'delete'")
            .whenNotMatchedInsert(condition="s.op = 'insert'", values={c: f"s.`{c}`" for c in winners.columns})
            .execute()
        )


def delete_rows(spark: SparkSession, path: str, rows: DataFrame, since_us: int) -> None:
    """Delete the rows at ``rows``' coordinates from the table at ``path`` (a MERGE; run again, it
    deletes nothing). ``since_us`` (epoch microseconds), at most their earliest arrival, lets Delta
    rewrite only files written since."""
    (
        table(spark, path)
        .alias("t")
        .merge(rows.alias("s"), f"t.arrival_time >= timestamp_micros({int(since_us)}) AND {SAME_RECORD}")
        .whenMatchedDelete()
        .execute()
    )


# A batch that changes at most this many stored sessions names them in its overwrite's predicate
# (about 10 Spark executions where a MERGE runs about 20); one that changes more MERGEs.
REPLACED_AT_MOST = 10_000


def apply_session_changes(
    spark: SparkSession,
    path: str,
    compared: DataFrame,
    changed: int,
    inserted: int,
    since_us: int | None = None,
    write_id: WriteId | None = None,
    replaced_at_most: int = REPLACED_AT_MOST,
    written_ids: list[str] | None = None,
) -> None:
    """Write :func:`spark_jobs.session_changes.compare`'s answer in one commit.

    With updates or deletes of at most ``replaced_at_most`` sessions, an overwrite that replaces
    the rows of the sessions the answer names (``replaceWhere`` on their IDs: Delta marks the stored
    rows deleted and appends the new ones); with more, one MERGE on ``session_id`` does all three.
    Either way, running it twice changes nothing. With inserts only, an append. ``write_id``: see
    :class:`WriteId`. ``since_us`` (epoch microseconds), at most the earliest anchor, lets Delta skip
    files of sessions that started before it: only sessions from an anchor on are compared.
    ``written_ids``: the IDs of the answer's rows that are not ``same``, when the comparison observed
    them (``session_changes.op_counts(with_ids=True)``); otherwise the overwrite collects them.
    """
    if changed and changed + inserted <= replaced_at_most:
        named = compared.where("op IN ('update', 'delete', 'insert')")
        if written_ids is None:
            written_ids = [row[0] for row in named.select("session_id").collect()]
        ids = ", ".join(f"'{i}'" for i in sorted(written_ids))  # 32 hex digits each
        bound = f"started_at >= timestamp_micros({int(since_us)}) AND " if since_us is not None else ""
        writer = (
            named.where("op <> 'delete'")
            .select(*SESSION_COLUMNS)
            .write.format("delta")
            .mode("overwrite")
            .option("replaceWhere", f"{bound}session_id IN ({ids})")
        )
        if write_id is not None:
            writer = writer.option("txnAppId", write_id.app_id).option("txnVersion", write_id.version)
        writer.save(path)
    elif changed:
        bound = f"t.started_at >= timestamp_micros({int(since_us)}) AND " if since_us is not None else ""
        with dml_write_id(spark, write_id):
            (
                table(spark, path)
                .alias("t")
                .merge(
                    compared.where("op IN ('update', 'delete', 'insert')").alias("s"),
                    f"{bound}t.session_id = s.session_id",
                )
                .whenMatchedDelete(condition="s.op = 'delete'")
                .whenMatchedUpdate(condition="s.op = 'update'", set={c: f"s.`{c}`" for c in SESSION_COLUMNS})
                .whenNotMatchedInsert(condition="s.op = 'insert'", values={c: f"s.`{c}`" for c in SESSION_COLUMNS})
                .execute()
            )
    elif inserted:
        append(in_files(compared.where("op = 'insert'").select(*SESSION_COLUMNS), inserted), path, write_id)


def range_filter(ranges: list[PartitionRange], alias: str = "") -> str:
    """SQL predicate on (``alias``'s) coordinates inside ``ranges`` (lets Delta skip files by offset stats)."""
    t = f"{alias}." if alias else ""
    return " OR ".join(
        f"({t}topic = '{r.topic}' AND {t}partition = {r.partition} AND {t}offset >= {r.start} AND {t}offset < {r.end})"
        for r in ranges
    )


# The tables every batch of a scheduled run reads (the dedupe's lookup, the touched sessions) and
# writes when it accepts a record. Not for a backfill: a replay of a range the lake holds writes nothing.
LOADED_AHEAD = ("events", "sessions")


@contextmanager
def states_loaded_ahead(
    spark: SparkSession, settings: Settings, names: tuple[str, ...] = LOADED_AHEAD
) -> Iterator[None]:
    """Meanwhile, the latest state of the sink tables ``names`` loaded in a thread of its own
    (:func:`jvm.load_table_state`), joined at the end.

    A run's checks before its first batch wait on PostgreSQL and Kafka while a cold JVM idles; the
    state its first batch would otherwise load on its critical path (each table's log replayed, and
    the transaction versions an idempotent write looks up) is loaded then, on the other core.
    Best effort: a table that cannot be loaded now is left to its first reader, which says why.
    """

    def load() -> None:
        for name in names:
            try:
                jvm.load_table_state(spark, settings.table_path(name))
            except Exception:
                log.debug("the state of %s was not loaded ahead", name, exc_info=True)

    thread = threading.Thread(target=load, name="tidemark-table-states", daemon=True)
    thread.start()
    try:
        yield
    finally:
        thread.join()


def table_versions(spark: SparkSession, settings: Settings) -> dict[str, int]:
    """The latest commit version of each sink table."""
    return {name: table(spark, settings.table_path(name)).history(1).first()["version"] for name in TABLE_SCHEMAS}


def files_rewritten_since(spark: SparkSession, settings: Settings, versions: dict[str, int]) -> int:
    """Data files added or removed by the sink tables' commits after ``versions`` (0 for a replay)."""
    counted = ("numTargetFilesAdded", "numTargetFilesRemoved", "numFiles", "numAddedFiles", "numRemovedFiles")
    total = 0
    for name, version in versions.items():
        for commit in table(spark, settings.table_path(name)).history().collect():
            if commit["version"] > version:
                metrics = commit["operationMetrics"] or {}
                total += sum(int(metrics.get(key, 0)) for key in counted)
    return total


def sessions_summary(spark: SparkSession, settings: Settings) -> tuple[int, int]:
    """Row count and checksum of Delta ``sessions`` (comparable with sinks.postgres.sessions_summary)."""
    row = (
        table(spark, settings.table_path("sessions"))
        .toDF()
        .selectExpr("count(*) AS n", f"{SESSIONS_CHECKSUM} AS checksum")
        .first()
    )
    return int(row["n"]), int(row["checksum"])


def fingerprint(spark: SparkSession, settings: Settings, name: str) -> tuple[int, str]:
    """Row count and an order-independent checksum of any sink table, to show that nothing changed."""
    row = (
        spark.read.format("delta")
        .load(settings.table_path(name))
        .selectExpr("count(*)", "coalesce(sum(cast(xxhash64(to_json(struct(*))) AS decimal(38, 0))), 0)")
        .first()
    )
    assert row is not None  # an aggregate without groups is one row
    return int(row[0]), str(row[1])


def owners(held: DataFrame) -> DataFrame:
    """``held`` with one row per record: the table that accounts for it. An offset both ``events``
    and ``duplicates`` hold is the row a takeover displaces, between an attempt that committed its
    ``duplicates`` and the ``events`` write that removes it (written last): it counts once, as the
    ``events`` row the batch ranks again."""
    from pyspark.sql import functions as F

    tables = held.groupBy(*COORDINATES).agg(F.collect_set("table").alias("tables"))
    owner = F.when(F.array_contains("tables", "events"), F.lit("events")).otherwise(F.col("tables")[0])
    return tables.select(*COORDINATES, owner.alias("table"))
