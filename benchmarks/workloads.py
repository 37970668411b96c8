"""What the stages time and set up besides tidemark's own jobs: the baselines (a consumer drain, an
AvailableNow raw append, a trivial spark-submit), spark-submit itself, the changed rows of the
PostgreSQL stage, the pre-populated sinks of the growth stage and the hot key's events.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.context import ensure, session_rules
from spark_jobs.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from spark_jobs.offsets import PartitionRange

EVENTS_PER_PREPOP_SESSION = 10
TRIVIAL_APP = '''"""A trivial Spark job: the floor any spark-submit pays (the bench's empty-run baseline)."""
from pyspark.sql import SparkSession

spark = SparkSession.builder.appName("tidemark-bench-trivial").getOrCreate()
print(spark.range(1).count())
spark.stop()
'''


def drain(settings: Settings, ranges: list[PartitionRange], idle_timeout: float = 30.0) -> tuple[int, int]:
    """Read every committed record of ``ranges`` with one consumer; returns (records, value bytes)."""
    from spark_jobs.committed import committed_records

    count, size = 0, 0
    for message in committed_records(settings, ranges, idle_timeout, group_id=f"tidemark-bench-{uuid.uuid4().hex[:8]}"):
        count += 1
        value = message.value()
        size += len(value) if value else 0
    return count, size


def append_available_now(spark: SparkSession, settings: Settings, topic: str, max_offsets_per_trigger: int) -> None:
    """Structured Streaming, AvailableNow: the topic appended raw to the Delta table ``raw_append``,
    at most ``max_offsets_per_trigger`` records a batch (Spark's own limit)."""
    from spark_jobs.kafka_source import stream_reader

    query = (
        stream_reader(spark, settings, topic, max_offsets_per_trigger, True)
        .load()
        .select("topic", "partition", "offset", "timestamp", "timestampType", "key", "value")
        .writeStream.format("delta")
        .outputMode("append")
        .partitionBy("partition")
        .option("checkpointLocation", f"{settings.checkpoint_root}/raw_append")
        .trigger(availableNow=True)
        .start(settings.table_path("raw_append"))
    )
    query.awaitTermination()


def with_collector(conf: dict[str, str], collector: str | None) -> list[tuple[str, str]]:
    """``conf``'s items with the driver's garbage collector option replaced by ``collector`` (none: as it is)."""
    if collector is None:
        return list(conf.items())
    key = "spark.driver.extraJavaOptions"
    java = [o for o in conf.get(key, "").split() if not (o.startswith("-XX:+Use") and o.endswith("GC"))]
    return list((conf | {key: " ".join([*java, collector])}).items())


def submit_env(settings: Settings, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a spark-submit of a tidemark job against ``settings``.

    ``base`` (default: this process's environment) without its own ``TIDEMARK_*`` settings and
    PySpark gateway variables, this Python's folder first on PATH and as PYSPARK_PYTHON, and
    ``settings.to_env()``: the job's ``Settings.from_env()`` equals ``settings``.
    """
    base = os.environ if base is None else base
    env = {k: v for k, v in base.items() if not k.startswith(("TIDEMARK_", "PYSPARK_GATEWAY", "PYSPARK_DRIVER"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYSPARK_PYTHON"] = sys.executable
    env.update(settings.to_env())
    return env


def spark_submit(
    settings: Settings,
    app: Path,
    args: list[str],
    timeout: float = 600,
    records: int | None = None,
    collector: str | None = None,
) -> str:
    """spark-submit ``app`` against ``settings``, with the master, memory, jars and driver settings
    tidemark's jobs get from a DAG's task (:func:`spark_jobs.spark.driver_conf`, for a run of
    ``records`` records when that is known). ``collector`` (a JVM option such as ``-XX:+UseG1GC``)
    replaces the driver's garbage collector, whichever tidemark picked.

    Returns the job's stdout; raises with the tail of its stderr when it fails.
    """
    from spark_jobs.spark import driver_conf, spark_jars

    bin_dir = Path(sys.executable).parent
    submit = str(bin_dir / "spark-submit") if (bin_dir / "spark-submit").exists() else shutil.which("spark-submit")
    if submit is None:
        raise FileNotFoundError("spark-submit was not found next to this Python or on PATH; run `make venv`")
    env = submit_env(settings)
    command = [
        submit,
        "--master",
        settings.spark_master,
        "--jars",
        ",".join(str(j) for j in spark_jars(settings)),
        "--driver-memory",
        settings.driver_memory,
        "--conf",
        f"spark.pyspark.python={sys.executable}",
        *(
            arg
            for key, value in with_collector(
                driver_conf(settings, settings.spark_master, records, environ=env), collector
            )
            for arg in ("--conf", f"{key}={value}")
        ),
        str(app),
        *args,
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        tail = "\n".join(done.stderr.splitlines()[-25:])
        raise RuntimeError(f"spark-submit {app.name} {' '.join(args)} failed ({done.returncode}):\n{tail}")
    return done.stdout


def changed_rows(rows: Sequence[tuple], fraction: float) -> list[tuple]:
    """``rows`` with every (1/fraction)-th session one event longer (event_count is column 6)."""
    step = max(1, round(1 / fraction))
    out = []
    for i, row in enumerate(rows):
        if i % step == 0:
            row = (*row[:6], str(int(row[6]) + 1), *row[7:])
        out.append(row)
    return out


def prepopulate(
    spark: SparkSession, settings: Settings, entities: int, sessions_per_entity: int, prefix: str, partitions: int
) -> int:
    """Write a consistent history straight into a fresh sink: Delta events and sessions, PostgreSQL sessions.

    Entity ``e`` (named as the producer names it) has one session per day for ``sessions_per_entity``
    days ending yesterday, each of 10 events one minute apart, so no new record can join them. The
    sessions are checked against the pipeline's own ``sessionize`` (with ``settings.session_rules``)
    for a few entities. Returns the number of sessions.
    """
    from spark_jobs.sinks.delta_tables import ensure_tables

    m = EVENTS_PER_PREPOP_SESSION
    day_ms = 86_400_000
    base_ms = (int(time.time() * 1000) // day_ms - sessions_per_entity - 1) * day_ms
    total = entities * sessions_per_entity * m
    ensure_tables(spark, settings)
    grid = _prepop_grid(spark, total, entities, base_ms)
    files = max(1, total // 50_000)
    (
        _prepop_events(grid, prefix, partitions)
        .repartitionByRange(files, "arrival_time")
        .sortWithinPartitions("arrival_time")
        .write.format("delta")
        .mode("append")
        .save(settings.table_path("events"))
    )
    (
        _prepop_sessions(grid, prefix)
        .repartitionByRange(max(1, files // m), "started_at")
        .write.format("delta")
        .mode("append")
        .save(settings.table_path("sessions"))
    )
    _check_prepop_sessions(spark, settings, entities, prefix)
    return _copy_prepop_sessions(spark, settings)


def _prepop_grid(spark: SparkSession, total: int, entities: int, base_ms: int) -> DataFrame:
    """The ``total`` events as (id, entity e, day s, event j of its session, arrival_ms): a day apart from
    ``base_ms`` per session, a minute apart within one, 50 ms apart per entity."""
    from pyspark.sql import functions as F

    m, day_ms = EVENTS_PER_PREPOP_SESSION, 86_400_000
    base = spark.range(total).select(
        F.col("id"),
        (F.col("id") % entities).alias("e"),
        F.floor(F.col("id") / (entities * m)).alias("s"),
        (F.floor(F.col("id") / entities) % m).alias("j"),
    )
    return base.withColumn("arrival_ms", F.lit(base_ms) + F.col("s") * day_ms + F.col("j") * 60_000 + F.col("e") * 50)


def _prepop_entity_id(prefix: str) -> Column:
    """Entity ``e``'s ID, as the producer names it."""
    from pyspark.sql import functions as F

    return F.format_string("%sentity-%06d", F.lit(prefix), F.col("e"))


def _prepop_events(grid: DataFrame, prefix: str, partitions: int) -> DataFrame:
    """The grid's events as the ``events`` table holds them."""
    from pyspark.sql import functions as F

    from spark_jobs.contract import EVENT_COLUMNS

    return grid.select(
        F.lit(f"bench-prepop-{prefix}").alias("topic"),
        (F.col("e") % partitions).cast("int").alias("partition"),
        F.col("id").cast("long").alias("offset"),
        F.timestamp_millis("arrival_ms").alias("arrival_time"),
        F.concat(F.lit(f"{prefix}pre-"), F.col("id").cast("string")).alias("event_id"),
        _prepop_entity_id(prefix).alias("entity_id"),
        F.lit("page_view").alias("event_type"),
        F.timestamp_millis(F.col("arrival_ms") - 5000).alias("event_time"),
        F.lit('{"page":"/p/1","value":1}').alias("properties"),
    ).select(*EVENT_COLUMNS)


def _prepop_sessions(grid: DataFrame, prefix: str) -> DataFrame:
    """The grid's sessions (an entity's events of one day) as the ``sessions`` table holds them."""
    from pyspark.sql import functions as F

    from spark_jobs.contract import SESSION_COLUMNS
    from spark_jobs.sessionize import SESSION_ID_SPARK_SQL

    return (
        grid.groupBy("e", "s")
        .agg(F.min("arrival_ms").alias("start_ms"), F.max("arrival_ms").alias("end_ms"), F.count("*").alias("n"))
        .select(
            _prepop_entity_id(prefix).alias("entity_id"),
            F.timestamp_millis("start_ms").alias("started_at"),
            F.timestamp_millis("end_ms").alias("ended_at"),
            F.timestamp_millis(F.col("start_ms") - 5000).alias("first_event_time"),
            F.timestamp_millis(F.col("end_ms") - 5000).alias("last_event_time"),
            F.col("n").cast("long").alias("event_count"),
            ((F.col("end_ms") - F.col("start_ms")) / 1000.0).cast("double").alias("duration_seconds"),
        )
        .withColumn("session_id", F.expr(SESSION_ID_SPARK_SQL))
        .select(*SESSION_COLUMNS)
    )


def _check_prepop_sessions(spark: SparkSession, settings: Settings, entities: int, prefix: str) -> None:
    """The stored sessions of the first, middle and last entity are those ``sessionize`` computes from their events."""
    from pyspark.sql import functions as F

    from spark_jobs.contract import SESSION_COLUMNS
    from spark_jobs.sessionize import sessionize

    stored = spark.read.format("delta").load(settings.table_path("sessions"))
    sample = [f"{prefix}entity-{e:06d}" for e in sorted({0, entities // 2, entities - 1})]
    stored_events = spark.read.format("delta").load(settings.table_path("events"))
    stored_events = stored_events.where(F.col("entity_id").isin(sample))
    expected = {tuple(r) for r in sessionize(stored_events, session_rules(settings)).collect()}
    actual = {tuple(r) for r in stored.where(F.col("entity_id").isin(sample)).select(*SESSION_COLUMNS).collect()}
    ensure(expected == actual, "the pre-populated sessions differ from what sessionize computes")


def _copy_prepop_sessions(spark: SparkSession, settings: Settings) -> int:
    """The stored sessions copied to PostgreSQL (then analyzed); returns how many."""
    from spark_jobs import db
    from spark_jobs.contract import SESSION_COLUMNS
    from spark_jobs.sinks.postgres import copy_rows, rows_as_text

    stored = spark.read.format("delta").load(settings.table_path("sessions"))
    rows = rows_as_text(stored, SESSION_COLUMNS)
    with db.transaction(settings.postgres_dsn) as cur:
        copy_rows(cur, "sessions", SESSION_COLUMNS, rows)
        cur.execute("ANALYZE sessions")
    return len(rows)


HOTKEY_SPAN = timedelta(hours=48)
HOTKEY_SPREAD_ENTITIES = 5_000


def steady_events(spark: SparkSession, count: int, entities: int) -> DataFrame:
    """``count`` events of ``entities`` entities, evenly spaced over :data:`HOTKEY_SPAN` per entity
    (never a gap of 30 minutes for ``count / entities`` above 96), cached in memory."""
    from pyspark.sql import functions as F

    per_entity = max(1, count // entities)
    step_us = int(HOTKEY_SPAN.total_seconds() * 1_000_000) // per_entity
    start_us = 1_780_000_000_000_000  # 2026-05-28
    events = spark.range(count).select(
        F.concat(F.lit("entity-"), (F.col("id") % entities).cast("string")).alias("entity_id"),
        F.timestamp_micros(F.lit(start_us) + (F.col("id") / entities).cast("long") * step_us).alias("arrival_time"),
        F.lit("events").alias("topic"),
        F.lit(0).alias("partition"),
        F.col("id").alias("offset"),
    )
    events = events.withColumn("event_time", F.col("arrival_time")).cache()
    events.count()
    return events
