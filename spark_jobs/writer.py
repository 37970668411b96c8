"""The foreachBatch writer: one frozen batch of Kafka records into Delta and PostgreSQL, exactly once.

Scheduled (streaming) runs and backfills both call :meth:`BatchWriter.write` with the
``foreachBatch`` signature ``(batch_df, batch_id)``. Per batch:

1. the ledger is checked: a batch whose ledger row exists is a no-op (nothing is rewritten);
2. records are parsed; invalid ones are MERGEd into ``quarantine`` keyed by their coordinates;
3. valid ones are deduplicated by ``event_id`` against the batch and every earlier batch: the first
   arrival (timestamp, partition, offset) is the ``events`` row, the others are ``duplicates``;
4. the sessions of the entities the batch touched are recomputed from stored events, starting at
   an anchor no new record can affect, and replace the stored ones in Delta (MERGE, stale IDs
   deleted) and then in PostgreSQL (COPY to staging, upsert, delete replaced IDs) in the same
   transaction as the batch's ledger row.

Every step is an idempotent MERGE of absolute values, so a batch that fails anywhere and is run
again ends exactly as one clean run (DESIGN invariants 1, 4, 5, 6).
"""

from __future__ import annotations

import io
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
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
    seconds: dict[str, float] = field(default_factory=dict)  # time per step, for profiling


def ensure_tables(spark: SparkSession, settings: Settings) -> None:
    """Create the Delta tables if they do not exist (idempotent)."""
    from delta.tables import DeltaTable

    for name, schema in TABLE_SCHEMAS.items():
        builder = DeltaTable.createIfNotExists(spark).location(settings.table_path(name))
        for column in schema.split(", "):
            column_name, column_type = column.split(" ")
            builder = builder.addColumn(column_name, column_type)
        builder.execute()


def table_versions(spark: SparkSession, settings: Settings) -> dict[str, int]:
    """The latest commit version of each sink table."""
    from delta.tables import DeltaTable

    return {
        name: DeltaTable.forPath(spark, settings.table_path(name)).history(1).first()["version"]
        for name in TABLE_SCHEMAS
    }


def files_rewritten_since(spark: SparkSession, settings: Settings, versions: dict[str, int]) -> int:
    """Data files added or removed by the sink tables' commits after ``versions`` (0 for a replay)."""
    from delta.tables import DeltaTable

    counted = ("numTargetFilesAdded", "numTargetFilesRemoved", "numFiles", "numAddedFiles", "numRemovedFiles")
    total = 0
    for name, version in versions.items():
        for commit in DeltaTable.forPath(spark, settings.table_path(name)).history().collect():
            if commit["version"] > version:
                metrics = commit["operationMetrics"] or {}
                total += sum(int(metrics.get(key, 0)) for key in counted)
    return total


class _Stopwatch:
    def __init__(self) -> None:
        self.laps: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = round(now - self._last, 3)
        self._last = now


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

    def _append_new(self, name: str, rows: DataFrame) -> None:
        """Append the ``rows`` whose coordinates ``name`` does not hold yet (so a retry adds nothing twice)."""
        new = rows.join(self._table(name).toDF().select(*COORDINATES), list(COORDINATES), "left_anti")
        new = new.localCheckpoint(eager=True)  # computed once, before the append changes the table
        if not new.isEmpty():
            new.write.format("delta").mode("append").save(self.settings.table_path(name))

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

        clock = _Stopwatch()
        parsed = parse_records(batch_df).localCheckpoint(eager=True)
        read = parsed.count()

        clock.lap("parse")
        # 1. quarantine
        quarantined_rows = parsed.where("quarantine_reason IS NOT NULL").select(
            *COORDINATES, "arrival_time", "key", "value", F.col("quarantine_reason").alias("reason")
        )
        quarantined = quarantined_rows.count()
        if quarantined:
            self._append_new("quarantine", quarantined_rows)

        clock.lap("quarantine")
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
            # A replayed record is both stored and in the batch.
            .agg(F.max("in_batch").alias("in_batch"), F.min("in_batch").alias("new"))
            .withColumn("new", F.col("in_batch") & F.col("new"))  # in the batch and not in `events`
            .withColumn("rank", F.row_number().over(arrival_order))
            # whether `events` already holds a copy of this event_id
            .withColumn("has_stored", F.max(~F.col("new")).over(Window.partitionBy("event_id")))
            .localCheckpoint(eager=True)  # freeze before the MERGEs below change the tables it read
        )
        counts = ranked.where("in_batch").groupBy((F.col("rank") == 1).alias("won")).count().collect()
        accepted = next((row["count"] for row in counts if row["won"]), 0)
        duplicates = next((row["count"] for row in counts if not row["won"]), 0)

        clock.lap("dedupe")
        # Only new winners change anything: a first arrival, or an earlier copy that takes over a
        # stored row. A replay has none, so it rewrites no Delta file and touches no session.
        # First arrivals are appended; only takeovers (rare) need a MERGE.
        new_winners = ranked.where("rank = 1 AND new")
        first_arrivals = new_winners.where("NOT has_stored").select(*EVENT_COLUMNS)
        if not first_arrivals.isEmpty():
            first_arrivals.write.format("delta").mode("append").save(self.settings.table_path("events"))
        takeovers = new_winners.where("has_stored").select(*EVENT_COLUMNS)
        if not takeovers.isEmpty():
            (
                self._table("events")
                .alias("t")
                .merge(takeovers.alias("s"), "t.event_id = s.event_id")
                .whenMatchedUpdateAll()
                .execute()
            )
        clock.lap("events")
        # Losers go to duplicates (a stored row that lost to an earlier copy found now moves there);
        # copies already there are left alone.
        losers = ranked.where("rank > 1").select(*COORDINATES, "arrival_time", "event_id", "entity_id")
        self._append_new("duplicates", losers)
        clock.lap("duplicates")
        # Entities whose sessions may change, and the earliest arrival in the batch for each. All of
        # the batch's entities, not only new winners: a retry after a crash between the Delta and
        # the PostgreSQL writes finds its events stored already, yet PostgreSQL still needs them.
        touched = (
            ranked.where("rank = 1 AND in_batch")
            .groupBy("entity_id")
            .agg(F.min("arrival_time").alias("first_new_arrival"))
        )

        # 3. sessions of the touched entities, recomputed from the anchor on.
        recomputed, anchors = self._recompute_sessions(touched)
        clock.lap("sessions")
        self._crash("after_delta")

        # 4. PostgreSQL: sessions and the ledger row, one transaction.
        counts_row = ledger.BatchCounts(read=read, accepted=accepted, duplicates=duplicates, quarantined=quarantined)
        with conn, conn.cursor() as cur:
            cur.execute("LOCK TABLE ledger_batches IN SHARE ROW EXCLUSIVE MODE")
            if ledger.batch_exists(cur, self.pipeline, batch_id):
                raise RuntimeError(f"batch {batch_id} of {self.pipeline} was committed concurrently")
            written, deleted = upsert_sessions(cur, recomputed, anchors)
            ledger.record_batch(cur, self.pipeline, batch_id, ranges, counts_row)
        clock.lap("postgres")
        return BatchResult(
            self.pipeline,
            batch_id,
            ranges,
            read,
            accepted,
            duplicates,
            quarantined,
            written,
            deleted,
            skipped=False,
            seconds=clock.laps,
        )

    def _recompute_sessions(self, touched: DataFrame) -> tuple[list[tuple], list[tuple]]:
        """Replace the touched entities' sessions from their anchor on in Delta.

        Returns the recomputed rows and the ``(entity_id, anchor)`` pairs, both as text for COPY,
        so PostgreSQL can be brought to the same state whatever it held before.
        """
        from pyspark.sql import functions as F

        if touched.isEmpty():
            return [], []
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
        # Files are written in arrival order, so the literal lower bound lets Delta skip old files.
        earliest = anchors.agg(F.min("anchor")).first()[0]
        events = (
            self._table("events")
            .toDF()
            .where(F.col("arrival_time") >= F.lit(earliest))
            .join(anchors, "entity_id")
            .where("arrival_time >= anchor")
        )
        recomputed = sessionize(events, self.rules).localCheckpoint(eager=True)
        stored = sessions.join(anchors, "entity_id").where("started_at >= anchor").select(*SESSION_COLUMNS)
        # Only rows that differ from what is stored are written: a replay commits nothing. New
        # session IDs are appended; changed and replaced ones go through a MERGE.
        stored_ids = stored.select("session_id")
        changed = recomputed.join(stored, list(SESSION_COLUMNS), "left_anti")
        inserts = changed.join(stored_ids, "session_id", "left_anti").select(*SESSION_COLUMNS)
        changes = (
            changed.join(stored_ids, "session_id", "left_semi")
            .withColumn("op", F.lit("upsert"))
            .unionByName(
                stored_ids.join(recomputed.select("session_id"), "session_id", "left_anti").withColumn(
                    "op", F.lit("delete")
                ),
                allowMissingColumns=True,
            )
            .localCheckpoint(eager=True)
        )
        inserts = inserts.localCheckpoint(eager=True)
        if not changes.isEmpty():
            differs = " OR ".join(f"NOT (t.`{c}` <=> s.`{c}`)" for c in SESSION_COLUMNS)
            (
                self._table("sessions")
                .alias("t")
                .merge(changes.alias("s"), "t.session_id = s.session_id")
                .whenMatchedDelete(condition="s.op = 'delete'")
                .whenMatchedUpdate(
                    condition=f"s.op = 'upsert' AND ({differs})", set={c: f"s.`{c}`" for c in SESSION_COLUMNS}
                )
                .execute()
            )
        if not inserts.isEmpty():
            inserts.write.format("delta").mode("append").save(self.settings.table_path("sessions"))
        return _as_text(recomputed, SESSION_COLUMNS), _as_text(anchors, ("entity_id", "anchor"))


def _as_text(df: DataFrame, columns: tuple[str, ...]) -> list[tuple]:
    """Rows with timestamps formatted for PostgreSQL's COPY (UTC offset included)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import TimestampType

    types = dict((f.name, f.dataType) for f in df.schema.fields)
    formatted = df.select(
        *[
            F.date_format(c, "yyyy-MM-dd HH:mm:ss.SSSSSSXXX").alias(c) if isinstance(types[c], TimestampType) else c
            for c in columns
        ]
    )
    return [tuple(row) for row in formatted.toLocalIterator()]


def upsert_sessions(cur, rows: list[tuple], anchors: list[tuple]) -> tuple[int, int]:  # noqa: ANN001 - psycopg2 cursor
    """Make PostgreSQL's sessions of the ``anchors`` entities, from each anchor on, equal ``rows``.

    ``rows`` (SESSION_COLUMNS order) are COPYed to staging and upserted; sessions of those entities
    that start at or after the entity's anchor and are not in ``rows`` are deleted. Returns
    (rows inserted or changed, rows deleted); both are 0 when PostgreSQL already matched.
    """
    cur.execute("CREATE TEMP TABLE IF NOT EXISTS sessions_staging (LIKE sessions INCLUDING DEFAULTS) ON COMMIT DROP")
    cur.execute(
        "CREATE TEMP TABLE IF NOT EXISTS session_anchors (entity_id text PRIMARY KEY, anchor timestamptz NOT NULL) "
        "ON COMMIT DROP"
    )
    _copy(cur, "sessions_staging", SESSION_COLUMNS, rows)
    _copy(cur, "session_anchors", ("entity_id", "anchor"), anchors)
    written = 0
    if rows:
        cur.execute((QUERIES / "upsert_sessions.sql").read_text())
        written = cur.rowcount
    cur.execute((QUERIES / "delete_replaced_sessions.sql").read_text())
    return written, cur.rowcount


def _copy(cur, table: str, columns: tuple[str, ...], rows: list[tuple]) -> None:  # noqa: ANN001
    if not rows:
        return
    buffer = io.StringIO()
    for row in rows:
        buffer.write("\t".join("\\N" if value is None else str(value) for value in row) + "\n")
    buffer.seek(0)
    cur.copy_expert(f"COPY {table} ({', '.join(columns)}) FROM STDIN", buffer)
