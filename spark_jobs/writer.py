"""The foreachBatch writer: one frozen batch of Kafka records into Delta and PostgreSQL, exactly once.

Scheduled (streaming) runs and backfills both call :meth:`BatchWriter.write` with the
``foreachBatch`` signature ``(batch_df, batch_id)``. Per batch:

1. the ledger is checked: a batch whose ledger row exists is a no-op (nothing is rewritten);
2. records are parsed; invalid ones are MERGEd into ``quarantine`` keyed by their coordinates;
3. valid ones are deduplicated by ``event_id`` against the batch and every earlier batch: the first
   arrival (timestamp, partition, offset) is the ``events`` row, the others are ``duplicates``;
4. the sessions of the entities the batch touched are recomputed from stored events, starting at
   an anchor no new record can affect, and replace the stored ones in Delta (MERGE, stale IDs
   deleted) and then in PostgreSQL (COPY to staging, upsert, delete stale IDs) in the same
   transaction as the batch's ledger row.

Every step is an idempotent MERGE of absolute values, so a batch that fails anywhere and is run
again ends exactly as one clean run (DESIGN invariants 1, 4, 5, 6).
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from spark_jobs import ledger
from spark_jobs.offsets import PartitionRange
from spark_jobs.sessionize import SESSION_COLUMNS, SessionRules, sessionize
from spark_jobs.settings import Settings
from spark_jobs.validation import parse_records

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

COORDINATES = ("topic", "partition", "offset")
EVENT_COLUMNS = (
    "topic",
    "partition",
    "offset",
    "arrival_time",
    "event_id",
    "entity_id",
    "event_type",
    "event_time",
    "properties",
)
TABLE_SCHEMAS = {
    "events": "topic string, partition int, offset long, arrival_time timestamp, event_id string, "
    "entity_id string, event_type string, event_time timestamp, properties string",
    "duplicates": "topic string, partition int, offset long, arrival_time timestamp, event_id string, entity_id string",
    "quarantine": "topic string, partition int, offset long, arrival_time timestamp, key binary, value binary, "
    "reason string",
    "sessions": "session_id string, entity_id string, started_at timestamp, ended_at timestamp, "
    "first_event_time timestamp, last_event_time timestamp, event_count long, duration_seconds double",
}
# Test-only crash injection points (TIDEMARK_TEST_CRASH_AT); see tests/integration/test_ingest.py.
CRASH_POINTS = ("after_delta", "after_postgres")
QUERIES = Path(__file__).parent / "sql"


class InjectedCrash(RuntimeError):
    """Raised at a TIDEMARK_TEST_CRASH_AT point; only tests set it."""


@dataclass(frozen=True)
class BatchResult:
    pipeline: str
    batch_id: int
    ranges: list[PartitionRange]
    read: int
    accepted: int
    duplicates: int
    quarantined: int
    sessions_written: int
    sessions_deleted: int
    skipped: bool  # the ledger already had this batch


def _coordinates_match(left: str, right: str) -> str:
    return " AND ".join(f"{left}.`{c}` = {right}.`{c}`" for c in COORDINATES)


def ensure_tables(spark: SparkSession, settings: Settings) -> None:
    """Create the Delta tables if they do not exist (idempotent)."""
    from delta.tables import DeltaTable

    for name, schema in TABLE_SCHEMAS.items():
        builder = DeltaTable.createIfNotExists(spark).location(settings.table_path(name))
        for column in schema.split(", "):
            column_name, column_type = column.split(" ")
            builder = builder.addColumn(column_name, column_type)
        builder.execute()


class BatchWriter:
    """Writes one batch; ``ranges_for(batch_id)`` gives the batch's frozen per-partition ranges."""

    def __init__(
        self,
        spark: SparkSession,
        settings: Settings,
        pipeline: str,
        ranges_for: Callable[[int], list[PartitionRange]],
        rules: SessionRules | None = None,
    ) -> None:
        self.spark = spark
        self.settings = settings
        self.pipeline = pipeline
        self.ranges_for = ranges_for
        self.rules = rules or SessionRules()
        self.results: list[BatchResult] = []
        crash_at = os.environ.get("TIDEMARK_TEST_CRASH_AT") or None
        if crash_at not in (None, *CRASH_POINTS):
            raise ValueError(f"TIDEMARK_TEST_CRASH_AT must be one of {CRASH_POINTS}, got {crash_at!r}")
        self.crash_at = crash_at
        ensure_tables(spark, settings)

    def _table(self, name: str):  # -> DeltaTable
        from delta.tables import DeltaTable

        return DeltaTable.forPath(self.spark, self.settings.table_path(name))

    def _crash(self, point: str) -> None:
        if self.crash_at == point:
            raise InjectedCrash(f"injected crash {point} (TIDEMARK_TEST_CRASH_AT)")

    def write(self, batch_df: DataFrame, batch_id: int) -> None:
        """The foreachBatch function."""
        ranges = self.ranges_for(batch_id)
        conn = ledger.connect(self.settings.postgres_dsn)
        try:
            with conn, conn.cursor() as cur:
                recorded = ledger.batch_ranges(cur, self.pipeline, batch_id)
            if recorded and recorded != sorted(ranges):
                # Same batch id, different offsets: the checkpoint was reset or moved. Skipping would
                # silently drop data and re-processing would break the ledger, so stop.
                raise RuntimeError(
                    f"the ledger has batch {batch_id} of {self.pipeline} with ranges {recorded}, but this run "
                    f"froze {sorted(ranges)}. Was the checkpoint deleted or moved? Restore it, or give this "
                    "stream a new pipeline name."
                )
            if recorded:
                self.results.append(BatchResult(self.pipeline, batch_id, ranges, 0, 0, 0, 0, 0, 0, skipped=True))
                return
            result = self._write_new_batch(conn, batch_df, batch_id, ranges)
        finally:
            conn.close()
        self.results.append(result)
        self._crash("after_postgres")

    def _write_new_batch(self, conn, batch_df: DataFrame, batch_id: int, ranges: list[PartitionRange]) -> BatchResult:  # noqa: ANN001
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        parsed = parse_records(batch_df).localCheckpoint(eager=True)
        read = parsed.count()

        # 1. quarantine
        quarantined_rows = parsed.where("quarantine_reason IS NOT NULL").select(
            *COORDINATES, "arrival_time", "key", "value", F.col("quarantine_reason").alias("reason")
        )
        quarantined = quarantined_rows.count()
        if quarantined:
            (
                self._table("quarantine")
                .alias("t")
                .merge(quarantined_rows.alias("s"), _coordinates_match("t", "s"))
                .whenNotMatchedInsertAll()
                .execute()
            )

        # 2. dedupe: first arrival per event_id wins, across this batch and everything stored.
        candidates = (
            parsed.where("quarantine_reason IS NULL").select(*EVENT_COLUMNS).withColumn("in_batch", F.lit(True))
        )
        events = self._table("events").toDF()
        stored = (
            events.join(candidates.select("event_id").distinct(), "event_id", "left_semi")
            .select(*EVENT_COLUMNS)
            .withColumn("in_batch", F.lit(False))
        )
        arrival_order = Window.partitionBy("event_id").orderBy("arrival_time", "partition", "offset")
        ranked = (
            candidates.unionByName(stored)
            .groupBy(*EVENT_COLUMNS)
            .agg(F.max("in_batch").alias("in_batch"))  # a replayed record is both stored and in the batch
            .withColumn("rank", F.row_number().over(arrival_order))
            .localCheckpoint(eager=True)  # freeze before the MERGEs below change the tables it read
        )
        winners = ranked.where("rank = 1")
        counts = ranked.where("in_batch").groupBy((F.col("rank") == 1).alias("won")).count().collect()
        accepted = next((row["count"] for row in counts if row["won"]), 0)
        duplicates = next((row["count"] for row in counts if not row["won"]), 0)

        # Entities whose sessions may change, and the earliest arrival that changed for each.
        touched = winners.where("in_batch").groupBy("entity_id").agg(F.min("arrival_time").alias("first_new_arrival"))
        (
            self._table("events")
            .alias("t")
            .merge(winners.select(*EVENT_COLUMNS).alias("s"), "t.event_id = s.event_id")
            .whenMatchedUpdateAll(condition=f"NOT ({_coordinates_match('t', 's')})")
            .whenNotMatchedInsertAll()
            .execute()
        )
        # Losers go to duplicates; a stored copy that lost to an earlier one found now moves there,
        # and a copy that now wins leaves it.
        duplicate_changes = ranked.select(
            *COORDINATES, "arrival_time", "event_id", "entity_id", (F.col("rank") > 1).alias("is_duplicate")
        )
        (
            self._table("duplicates")
            .alias("t")
            .merge(duplicate_changes.alias("s"), _coordinates_match("t", "s"))
            .whenMatchedDelete(condition="NOT s.is_duplicate")
            .whenNotMatchedInsert(
                condition="s.is_duplicate",
                values={c: f"s.`{c}`" for c in (*COORDINATES, "arrival_time", "event_id", "entity_id")},
            )
            .execute()
        )

        # 3. sessions of the touched entities, recomputed from the anchor on.
        written, stale_ids = self._recompute_sessions(touched)
        self._crash("after_delta")

        # 4. PostgreSQL: sessions and the ledger row, one transaction.
        counts_row = ledger.BatchCounts(read=read, accepted=accepted, duplicates=duplicates, quarantined=quarantined)
        with conn, conn.cursor() as cur:
            cur.execute("LOCK TABLE ledger_batches IN SHARE ROW EXCLUSIVE MODE")
            if ledger.batch_exists(cur, self.pipeline, batch_id):
                raise RuntimeError(f"batch {batch_id} of {self.pipeline} was committed concurrently")
            upsert_sessions(cur, written, stale_ids)
            ledger.record_batch(cur, self.pipeline, batch_id, ranges, counts_row)
        return BatchResult(
            self.pipeline,
            batch_id,
            ranges,
            read,
            accepted,
            duplicates,
            quarantined,
            len(written),
            len(stale_ids),
            skipped=False,
        )

    def _recompute_sessions(self, touched: DataFrame) -> tuple[list[tuple], list[str]]:
        """Replace the touched entities' sessions from their anchor on; returns (rows, stale IDs)."""
        from pyspark.sql import functions as F

        gap_seconds = int(self.rules.gap.total_seconds())
        sessions = self._table("sessions").toDF()
        # The first stored session that a new record could join or follow within the gap; new
        # records cannot change anything that ended more than one gap before them.
        open_sessions = (
            sessions.join(touched, "entity_id")
            .where(F.col("ended_at") >= F.col("first_new_arrival") - F.expr(f"INTERVAL {gap_seconds} SECONDS"))
            .groupBy("entity_id")
            .agg(F.min("started_at").alias("open_start"))
        )
        anchors = (
            touched.join(open_sessions, "entity_id", "left")
            .select(
                "entity_id",
                F.least("first_new_arrival", F.coalesce("open_start", "first_new_arrival")).alias("anchor"),
            )
            .localCheckpoint(eager=True)
        )
        events = self._table("events").toDF().join(anchors, "entity_id").where("arrival_time >= anchor")
        recomputed = sessionize(events, self.rules).localCheckpoint(eager=True)
        replaced = (
            sessions.join(anchors, "entity_id")
            .where("started_at >= anchor")
            .select("session_id")
            .join(recomputed.select("session_id"), "session_id", "left_anti")
            .localCheckpoint(eager=True)
        )
        changes = recomputed.withColumn("op", F.lit("upsert")).unionByName(
            replaced.withColumn("op", F.lit("delete")), allowMissingColumns=True
        )
        differs = " OR ".join(f"NOT (t.`{c}` <=> s.`{c}`)" for c in SESSION_COLUMNS)
        (
            self._table("sessions")
            .alias("t")
            .merge(changes.alias("s"), "t.session_id = s.session_id")
            .whenMatchedDelete(condition="s.op = 'delete'")
            .whenMatchedUpdate(
                condition=f"s.op = 'upsert' AND ({differs})", set={c: f"s.`{c}`" for c in SESSION_COLUMNS}
            )
            .whenNotMatchedInsert(condition="s.op = 'upsert'", values={c: f"s.`{c}`" for c in SESSION_COLUMNS})
            .execute()
        )
        as_text = recomputed.select(
            *[
                F.date_format(c, "yyyy-MM-dd HH:mm:ss.SSSSSSXXX").alias(c)
                if c in ("started_at", "ended_at", "first_event_time", "last_event_time")
                else F.col(c)
                for c in SESSION_COLUMNS
            ]
        )
        rows = [tuple(row) for row in as_text.toLocalIterator()]
        return rows, [row["session_id"] for row in replaced.collect()]


def upsert_sessions(cur, rows: list[tuple], stale_ids: list[str]) -> None:  # noqa: ANN001 - psycopg2 cursor
    """COPY ``rows`` (SESSION_COLUMNS order) to a staging table, upsert them, delete ``stale_ids``."""
    cur.execute("CREATE TEMP TABLE IF NOT EXISTS sessions_staging (LIKE sessions INCLUDING DEFAULTS) ON COMMIT DROP")
    if rows:
        buffer = io.StringIO()
        for row in rows:
            buffer.write("\t".join("\\N" if value is None else str(value) for value in row) + "\n")
        buffer.seek(0)
        cur.copy_expert(f"COPY sessions_staging ({', '.join(SESSION_COLUMNS)}) FROM STDIN", buffer)
        cur.execute((QUERIES / "upsert_sessions.sql").read_text())
    if stale_ids:
        cur.execute("DELETE FROM sessions WHERE session_id = ANY(%s)", (stale_ids,))
