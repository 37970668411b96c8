"""PEER: the pipeline a competent user writes in a day from Spark's and Delta's documentation.

The bench's yardstick beside the raw baselines: what tidemark must beat to be worth its extra work.
Structured Streaming (AvailableNow, the same batch cap as tidemark) with ``foreachBatch``:

1. ``from_json`` with the contract's fields as a schema; records without the required fields or
   with an unparseable ``event_time`` are dropped (no quarantine, no reasons);
2. ``dropDuplicates("event_id")`` within the batch, then Delta's insert-only MERGE on ``event_id``
   into ``events`` (dedupe against everything stored);
3. the batch's entities' sessions recomputed from all their stored events with a window (a new
   session after the inactivity gap; IDs from the entity and the start), MERGEd into Delta
   ``sessions`` on ``session_id``;
4. the same sessions upserted into PostgreSQL (``INSERT ... ON CONFLICT DO UPDATE``).

It has no ledger, no takeovers of earlier copies, no maximum session length, no deletes of sessions
that a late record splits, no fencing and no exactly-once guarantee for PostgreSQL: it is what a
first version looks like, not a reference of tidemark's semantics.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from benchmarks.context import session_rules
from spark_jobs.contract import SESSION_COLUMNS, TABLE_SCHEMAS
from spark_jobs.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

PEER_SCHEMA = "event_id string, entity_id string, event_type string, event_time string, properties string"
PEER_EVENTS = "peer_events"
PEER_SESSIONS = "peer_sessions"


def run_peer(spark: SparkSession, settings: Settings, topic: str, max_offsets_per_trigger: int) -> int:
    """Run the peer over ``topic`` into ``settings``' lake and PostgreSQL, at most ``max_offsets_per_trigger``
    records a batch (the bench gives B2, PEER and P1 the same cap); returns the records read."""
    from spark_jobs.kafka_source import stream_reader
    from spark_jobs.sinks.delta_tables import create_table

    events_path, sessions_path = settings.table_path(PEER_EVENTS), settings.table_path(PEER_SESSIONS)
    create_table(spark, events_path, TABLE_SCHEMAS["events"])
    create_table(spark, sessions_path, TABLE_SCHEMAS["sessions"])
    gap_seconds = int(session_rules(settings).gap.total_seconds())
    read = [0]

    def batch(df: DataFrame, batch_id: int) -> None:
        df = df.persist()
        read[0] += df.count()
        new = parsed(df).dropDuplicates(["event_id"])
        insert_new_events(spark, events_path, new)
        sessions = entity_sessions(spark, events_path, new, gap_seconds).persist()
        merge_sessions(spark, sessions_path, sessions)
        upsert_sessions(settings.postgres_dsn, sessions)
        sessions.unpersist()
        df.unpersist()

    query = (
        stream_reader(spark, settings, topic, max_offsets_per_trigger, True)
        .load()
        .writeStream.foreachBatch(batch)
        .option("checkpointLocation", f"{settings.checkpoint_root}/peer")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return read[0]


def parsed(df: DataFrame) -> DataFrame:
    """1. The batch's records parsed with the contract's fields as a schema; those without a required field or
    with an unparseable ``event_time`` dropped."""
    from pyspark.sql import functions as F

    return (
        df.select(
            "topic",
            "partition",
            "offset",
            F.col("timestamp").alias("arrival_time"),
            F.from_json(F.col("value").cast("string"), PEER_SCHEMA).alias("j"),
        )
        .select("topic", "partition", "offset", "arrival_time", "j.*")
        .withColumn("event_time", F.expr("try_to_timestamp(event_time)"))
        .where("event_id IS NOT NULL AND entity_id IS NOT NULL AND event_type IS NOT NULL AND event_time IS NOT NULL")
    )


def insert_new_events(spark: SparkSession, events_path: str, new: DataFrame) -> None:
    """2. The batch's events (deduplicated within it) that ``events`` has no copy of: an insert-only MERGE."""
    from delta.tables import DeltaTable

    (
        DeltaTable.forPath(spark, events_path)
        .alias("t")
        .merge(new.alias("s"), "t.event_id = s.event_id")
        .whenNotMatchedInsertAll()
        .execute()
    )


def entity_sessions(spark: SparkSession, events_path: str, new: DataFrame, gap_seconds: int) -> DataFrame:
    """3. The sessions of the batch's entities, recomputed from all their stored events with a window: a new
    session after ``gap_seconds`` without an event; IDs from the entity and the start."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    entities = new.select("entity_id").distinct()
    history = spark.read.format("delta").load(events_path).join(entities, "entity_id")
    by_entity = Window.partitionBy("entity_id").orderBy("arrival_time", "partition", "offset")
    previous = F.lag("arrival_time").over(by_entity)
    starts = F.when(
        previous.isNull() | (F.col("arrival_time") > previous + F.expr(f"INTERVAL {gap_seconds} SECONDS")), 1
    ).otherwise(0)
    numbered = history.withColumn("starts", starts).withColumn("session_no", F.sum("starts").over(by_entity))
    return (
        numbered.groupBy("entity_id", "session_no")
        .agg(
            F.min("arrival_time").alias("started_at"),
            F.max("arrival_time").alias("ended_at"),
            F.min("event_time").alias("first_event_time"),
            F.max("event_time").alias("last_event_time"),
            F.count(F.lit(1)).alias("event_count"),
        )
        .withColumn("duration_seconds", F.expr("(unix_micros(ended_at) - unix_micros(started_at)) / 1e6"))
        .withColumn("session_id", F.sha2(F.concat_ws("|", "entity_id", F.col("started_at").cast("string")), 256))
        .select(*SESSION_COLUMNS)
    )


def merge_sessions(spark: SparkSession, sessions_path: str, sessions: DataFrame) -> None:
    """3. The sessions MERGEd into Delta ``sessions`` on ``session_id``."""
    from delta.tables import DeltaTable

    (
        DeltaTable.forPath(spark, sessions_path)
        .alias("t")
        .merge(sessions.alias("s"), "t.session_id = s.session_id")
        .whenMatchedUpdateAll()
        .whenNotMatchedInsertAll()
        .execute()
    )


def upsert_sessions(dsn: str, sessions: DataFrame) -> None:
    """4. The same sessions upserted into PostgreSQL (``INSERT ... ON CONFLICT DO UPDATE``)."""
    import psycopg2
    from psycopg2.extras import execute_values

    rows = [tuple(row) for row in sessions.collect()]
    conn = psycopg2.connect(dsn)
    try:
        with conn, conn.cursor() as cur:
            execute_values(
                cur,
                f"INSERT INTO sessions ({', '.join(SESSION_COLUMNS)}) VALUES %s ON CONFLICT (session_id) DO UPDATE "
                "SET " + ", ".join(f"{c} = EXCLUDED.{c}" for c in SESSION_COLUMNS[1:]),
                rows,
                page_size=5000,
            )
    finally:
        conn.close()
