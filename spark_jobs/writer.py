"""The foreachBatch writer: one frozen batch of Kafka records into Delta and PostgreSQL, exactly once.

Scheduled (streaming) runs and backfills both call :meth:`BatchWriter.write` with the
``foreachBatch`` signature ``(batch_df, batch_id)``. Per batch:

1. the ledger is checked: a batch whose ledger row exists is a no-op (nothing is rewritten);
2. records are read from Kafka and validated once; invalid ones are bound for ``quarantine``;
3. valid ones are deduplicated by ``event_id`` against the batch and every earlier batch: the first
   arrival (timestamp, partition, offset) is the ``events`` row, the others are ``duplicates``;
4. the sessions of the entities the batch touched are recomputed from the stored events plus the
   batch's new ones, starting at an anchor no new record can affect, and compared with the
   stored sessions;
5. the four Delta tables are written concurrently, only what differs: new records are inserted
   (an insert-only MERGE keyed by coordinates, or a plain append for first arrivals), changed
   and replaced sessions MERGEd; then PostgreSQL (COPY to staging, upsert, delete replaced IDs)
   in the same transaction as the batch's ledger row.

Every write is idempotent on its own (absolute values, nothing inserted twice), so a batch that
fails anywhere and is run again ends exactly as one clean run (DESIGN invariants 1, 4, 5, 6).
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
    """Create the Delta tables that do not exist yet (idempotent).

    A table whose ``_delta_log`` already holds commits is left alone without loading it: every
    run calls this, and loading four snapshots costs more than an empty run's work. Missing
    tables (a first run) are created concurrently.
    """
    hadoop_path = spark.sparkContext._jvm.org.apache.hadoop.fs.Path
    conf = spark.sparkContext._jsc.hadoopConfiguration()

    def missing(name: str) -> bool:
        log = hadoop_path(f"{settings.table_path(name).rstrip('/')}/_delta_log")
        fs = log.getFileSystem(conf)
        return not (fs.exists(log) and len(fs.listStatus(log)) > 0)

    def create(name: str) -> Callable[[], None]:
        def run() -> None:
            from delta.tables import DeltaTable

            builder = DeltaTable.createIfNotExists(spark).location(settings.table_path(name))
            for column in TABLE_SCHEMAS[name].split(", "):
                column_name, column_type = column.split(" ")
                builder = builder.addColumn(column_name, column_type)
            builder.execute()

        return run

    run_concurrently([create(name) for name in TABLE_SCHEMAS if missing(name)])


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

    def _insert_new(self, name: str, rows: DataFrame, bound: str) -> None:
        """Insert the ``rows`` whose coordinates ``name`` does not hold yet (so a retry adds nothing twice).

        An insert-only MERGE: one pass, and no commit at all when every row is stored already.
        ``bound`` (on ``t``, the stored rows) holds all of ``rows``, so Delta compares only the
        files that can match and the cost follows the batch, not the table.
        """
        same_record = " AND ".join(f"t.`{c}` = s.`{c}`" for c in COORDINATES)
        (
            self._table(name)
            .alias("t")
            .merge(rows.alias("s"), f"({bound}) AND {same_record}")
            .whenNotMatchedInsertAll()
            .execute()
        )

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
        from pyspark.sql import functions as F

        clock = _Stopwatch()
        # Read and validated once. Only quarantined records keep their raw key and value.
        quarantined_flag = F.col("quarantine_reason").isNotNull()
        parsed = parse_records(batch_df)
        parsed = parsed.select(
            *[F.when(quarantined_flag, F.col(c)).alias(c) if c in ("key", "value") else c for c in parsed.columns]
        ).localCheckpoint(eager=True)
        totals = parsed.agg(F.count(F.lit(1)).alias("read"), F.count("quarantine_reason").alias("quarantined")).first()
        clock.lap("parse")

        ranked = self._rank(parsed)
        counts = (
            ranked.agg(
                F.count_if(F.col("in_batch") & (F.col("rank") == 1)).alias("accepted"),
                F.count_if(F.col("in_batch") & (F.col("rank") > 1)).alias("duplicates"),
                F.count_if(F.col("new") & ~F.col("has_stored")).alias("first_arrivals"),
                F.count_if(F.col("new") & F.col("has_stored")).alias("takeovers"),
                F.count_if(F.col("rank") > 1).alias("losers"),
                F.min(F.when(F.col("rank") > 1, F.col("offset"))).alias("losers_from"),
                F.max(F.when(F.col("rank") > 1, F.col("offset"))).alias("losers_to"),
            )
            .first()
            .asDict()
        )
        clock.lap("dedupe")

        sessions = self._recompute_sessions(ranked, takeovers=counts["takeovers"] > 0)
        session_rows = _as_text(sessions.recomputed, SESSION_COLUMNS)
        anchor_rows = _as_text(sessions.anchors, ("entity_id", "anchor"))
        clock.lap("sessions")

        # The four tables are written concurrently: each write is idempotent on its own (appends
        # skip what is stored, MERGEs set absolute values), so any subset that fails is completed
        # by a retry. Small writes are mostly Delta log latency, which overlaps well.
        quarantined_rows = parsed.where(quarantined_flag).select(
            *COORDINATES, "arrival_time", "key", "value", F.col("quarantine_reason").alias("reason")
        )
        losers = ranked.where("rank > 1").select(*COORDINATES, "arrival_time", "event_id", "entity_id")
        writes = []
        if totals["quarantined"]:
            writes.append(lambda: self._insert_new("quarantine", quarantined_rows, _range_filter(ranges, "t")))
        if counts["losers"]:
            span = f"t.offset >= {counts['losers_from']} AND t.offset <= {counts['losers_to']}"
            writes.append(lambda: self._insert_new("duplicates", losers, span))
        if counts["first_arrivals"] or counts["takeovers"]:
            writes.append(lambda: self._write_events(ranked, counts))
        if sessions.changed or sessions.inserted:
            writes.append(lambda: self._write_sessions(sessions))
        run_concurrently(writes)
        clock.lap("delta")
        self._crash("after_delta")

        # PostgreSQL: sessions and the ledger row, one transaction.
        counts_row = ledger.BatchCounts(
            read=totals["read"],
            accepted=counts["accepted"],
            duplicates=counts["duplicates"],
            quarantined=totals["quarantined"],
        )
        with conn, conn.cursor() as cur:
            cur.execute("LOCK TABLE ledger_batches IN SHARE ROW EXCLUSIVE MODE")
            if ledger.batch_exists(cur, self.pipeline, batch_id):
                raise RuntimeError(f"batch {batch_id} of {self.pipeline} was committed concurrently")
            written, deleted = upsert_sessions(cur, session_rows, anchor_rows)
            ledger.record_batch(cur, self.pipeline, batch_id, ranges, counts_row)
        clock.lap("postgres")
        return BatchResult(
            self.pipeline,
            batch_id,
            ranges,
            counts_row.read,
            counts_row.accepted,
            counts_row.duplicates,
            counts_row.quarantined,
            written,
            deleted,
            skipped=False,
            seconds=clock.laps,
        )

    def _rank(self, parsed: DataFrame) -> DataFrame:
        """Valid records and the stored copies of their event_ids, ranked per event_id in arrival order.

        ``rank`` 1 is the first arrival (the ``events`` row); a replayed record is both stored and
        in the batch, with the same coordinates, so both copies have the same rank. ``new`` marks
        a winner that ``events`` does not hold yet, ``has_stored`` an event_id ``events`` holds.
        """
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        candidates = parsed.where("quarantine_reason IS NULL").select(*EVENT_COLUMNS, F.lit(True).alias("in_batch"))
        stored = (
            self._table("events")
            .toDF()
            .join(candidates.select("event_id"), "event_id", "left_semi")
            .select(*EVENT_COLUMNS, F.lit(False).alias("in_batch"))
        )
        by_event = Window.partitionBy("event_id")
        stored_first = F.max(~F.col("in_batch") & (F.col("rank") == 1)).over(by_event)
        return (
            candidates.unionByName(stored)
            .withColumn("rank", F.dense_rank().over(by_event.orderBy("arrival_time", "partition", "offset", "topic")))
            .withColumn("has_stored", F.max(~F.col("in_batch")).over(by_event))
            .withColumn("new", F.col("in_batch") & (F.col("rank") == 1) & ~stored_first)
            .localCheckpoint(eager=True)  # frozen before the writes change the tables it read
        )

    def _write_events(self, ranked: DataFrame, counts: dict) -> None:
        """First arrivals are appended; an earlier copy found now takes over its stored row (MERGE)."""
        if counts["first_arrivals"]:
            first_arrivals = ranked.where("new AND NOT has_stored").select(*EVENT_COLUMNS)
            first_arrivals.write.format("delta").mode("append").save(self.settings.table_path("events"))
        if counts["takeovers"]:
            takeovers = ranked.where("new AND has_stored").select(*EVENT_COLUMNS)
            (
                self._table("events")
                .alias("t")
                .merge(takeovers.alias("s"), "t.event_id = s.event_id")
                .whenMatchedUpdateAll()
                .execute()
            )

    def _recompute_sessions(self, ranked: DataFrame, takeovers: bool) -> _SessionChanges:
        """The touched entities' sessions from their anchor on, against what ``sessions`` holds.

        Touched are all of the batch's entities, not only those with new winners: a retry after a
        crash between the Delta and the PostgreSQL writes finds its events stored already, yet
        PostgreSQL still needs them. The events are what ``events`` holds plus the batch's new
        winners (minus the stored rows they take over), so this needs no write to happen first.
        """
        from pyspark.sql import functions as F

        touched = (
            ranked.where("rank = 1 AND in_batch").groupBy("entity_id").agg(F.min("arrival_time").alias("first_new"))
        )
        gap_seconds = int(self.rules.gap.total_seconds())
        stored_sessions = self._table("sessions").toDF()
        # The first stored session that a new record could join or follow within the gap; new
        # records cannot change anything that ended more than one gap before them.
        open_sessions = (
            stored_sessions.join(touched, "entity_id")
            .where(F.col("ended_at") >= F.col("first_new") - F.expr(f"INTERVAL {gap_seconds} SECONDS"))
            .groupBy("entity_id")
            .agg(F.min("started_at").alias("open_start"))
        )
        anchors = (
            touched.join(open_sessions, "entity_id", "left")
            .select("entity_id", F.least("first_new", F.coalesce("open_start", "first_new")).alias("anchor"))
            .localCheckpoint(eager=True)
        )
        # Files are written in arrival order, so the literal lower bound lets Delta skip old files.
        earliest = anchors.agg(F.min("anchor")).first()[0]
        if earliest is None:  # no valid record in the batch
            none = self.spark.createDataFrame([], f"{TABLE_SCHEMAS['sessions']}, op string")
            return _SessionChanges(anchors, none, 0, 0)
        columns = ("entity_id", "arrival_time", "partition", "offset", "event_time", "event_id")
        stored_events = (
            self._table("events")
            .toDF()
            .where(F.col("arrival_time") >= F.lit(earliest))
            .join(anchors, "entity_id")
            .where("arrival_time >= anchor")
            .select(*columns)
        )
        if takeovers:
            stored_events = stored_events.join(
                ranked.where("new AND has_stored").select("event_id"), "event_id", "left_anti"
            )
        events = stored_events.unionByName(ranked.where("new").select(*columns))
        recomputed = sessionize(events, self.rules)
        stored = stored_sessions.join(anchors, "entity_id").where("started_at >= anchor").select(*SESSION_COLUMNS)
        # One comparison decides every row: insert (new ID), update (same ID, other values),
        # delete (a stored ID no longer produced), or unchanged. Unchanged rows are not written,
        # so a replay commits nothing.
        r, s = recomputed.alias("r"), stored.alias("s")
        differs = " OR ".join(f"NOT (r.`{c}` <=> s.`{c}`)" for c in SESSION_COLUMNS[1:])
        compared = (
            r.join(s, F.col("r.session_id") == F.col("s.session_id"), "full_outer")
            .select(
                F.coalesce("r.session_id", "s.session_id").alias("session_id"),
                *[F.col(f"r.{c}").alias(c) for c in SESSION_COLUMNS[1:]],
                F.expr(
                    "CASE WHEN s.session_id IS NULL THEN 'insert' WHEN r.session_id IS NULL THEN 'delete' "
                    f"WHEN {differs} THEN 'update' ELSE 'same' END"
                ).alias("op"),
            )
            .localCheckpoint(eager=True)
        )
        ops = {row["op"]: row["count"] for row in compared.groupBy("op").count().collect()}
        return _SessionChanges(anchors, compared, ops.get("update", 0) + ops.get("delete", 0), ops.get("insert", 0))

    def _write_sessions(self, sessions: _SessionChanges) -> None:
        """Changed and replaced session IDs through a MERGE, new ones appended."""
        if sessions.changed:
            (
                self._table("sessions")
                .alias("t")
                .merge(sessions.compared.where("op IN ('update', 'delete')").alias("s"), "t.session_id = s.session_id")
                .whenMatchedDelete(condition="s.op = 'delete'")
                .whenMatchedUpdate(condition="s.op = 'update'", set={c: f"s.`{c}`" for c in SESSION_COLUMNS})
                .execute()
            )
        if sessions.inserted:
            inserts = sessions.compared.where("op = 'insert'").select(*SESSION_COLUMNS)
            inserts.write.format("delta").mode("append").save(self.settings.table_path("sessions"))


@dataclass(frozen=True)
class _SessionChanges:
    anchors: DataFrame  # (entity_id, anchor): each touched entity's sessions from here on were recomputed
    compared: DataFrame  # recomputed and stored sessions with op: insert, update, delete or same
    changed: int  # rows to update or delete
    inserted: int  # new session IDs

    @property
    def recomputed(self) -> DataFrame:
        """The touched entities' sessions from their anchors on."""
        return self.compared.where("op <> 'delete'").select(*SESSION_COLUMNS)


def _range_filter(ranges: list[PartitionRange], alias: str) -> str:
    """SQL predicate on ``alias``'s coordinates inside ``ranges`` (lets Delta skip files by offset stats)."""
    t = alias
    return " OR ".join(
        f"({t}.topic = '{r.topic}' AND {t}.partition = {r.partition} AND {t}.offset >= {r.start} "
        f"AND {t}.offset < {r.end})"
        for r in ranges
    )


def run_concurrently(steps: list[Callable[[], None]]) -> None:
    """Run Spark/Delta steps in threads (one Spark job queue each); wait for all, raise the first failure."""
    if len(steps) <= 1:
        for step in steps:
            step()
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=len(steps), thread_name_prefix="tidemark-delta") as pool:
        futures = [pool.submit(step) for step in steps]
    for future in futures:
        future.result()


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
