"""What the pipeline's integration tests check, against the real sinks."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from spark_jobs.contract import RECORD_TABLES
from spark_jobs.session_changes import SESSIONIZE_COLUMNS
from spark_jobs.sessionize import sessionize
from spark_jobs.settings import Settings
from spark_jobs.sinks import delta, postgres
from spark_jobs.sinks.delta_log import union

T = TypeVar("T")


def query(settings: Settings, sql: str, *args: object) -> list[tuple]:
    """Run ``sql`` on the settings' tidemark database; the rows it returns, if any."""
    from spark_jobs.db import transaction

    with transaction(settings.pipeline_dsn) as cur:
        cur.execute(sql, args)
        return cur.fetchall() if cur.description else []


def until(condition: Callable[[], object], what: str, timeout: float = 120) -> None:
    """Wait until ``condition()`` holds; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.2)


def waiting_for_the_lock(settings: Settings) -> bool:
    """Whether a run waits for an advisory lock (the writer lock) in the settings' database."""
    return query(settings, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")[0][0] > 0


def fail_over(settings: Settings) -> None:
    """What a PostgreSQL failover does to a running writer: every backend of the database dies,
    but for those waiting for a lock (a run waiting to take over)."""
    query(
        settings,
        """SELECT pg_terminate_backend(pid) FROM pg_stat_activity
           WHERE datname = current_database() AND pid <> pg_backend_pid()
             AND pid NOT IN (SELECT pid FROM pg_locks WHERE NOT granted)""",
    )


def take_over_inside(settings: Settings, point: str, take_over: Callable[[], object]):
    """A writer's fault hook that fails PostgreSQL over when the writer reaches ``point`` (a Delta
    write it already proved its lease for), while ``take_over`` (another run, in a thread) waits for
    the writer lock, and lets the writer go on once that run ended; and the list that gets that run's
    result, or what it raised."""
    import threading

    taken: list[object] = []

    def run() -> None:
        try:
            taken.append(take_over())
        except BaseException as exc:  # the caller's assertions report it
            taken.append(exc)

    thread = threading.Thread(target=run)

    def fault(reached: str) -> None:
        if reached != point or thread.is_alive() or taken:
            return
        thread.start()
        until(lambda: waiting_for_the_lock(settings), "the run that takes over waits for the lock")
        fail_over(settings)
        thread.join(timeout=600)

    return fault, taken


def dump_postgres(settings: Settings, path) -> None:
    """A ``pg_dump`` of the pipeline's schema in the settings' tidemark database to ``path`` (plain SQL that
    drops what it creates): a backup of the pipeline's state, which a restore puts back alone."""
    subprocess.run(
        ["pg_dump", "--clean", "--if-exists", "--no-owner", "-n", settings.postgres_schema, "-f", str(path),
         "-d", settings.postgres_dsn],
        check=True, capture_output=True,
    )  # fmt: skip


def restore_postgres(settings: Settings, path) -> None:
    """Restore the pipeline's schema from a :func:`dump_postgres` dump, as an operator restores a backup."""
    subprocess.run(
        ["psql", "-q", "-v", "ON_ERROR_STOP=1", "-d", settings.postgres_dsn, "-f", str(path)],
        check=True, capture_output=True,
    )  # fmt: skip


def delta_rows(spark, settings: Settings, table: str, *expressions: str) -> list:
    return spark.read.format("delta").load(settings.table_path(table)).selectExpr(*(expressions or ("*",))).collect()


def snapshot(spark, settings: Settings, pg, prefix: str) -> dict[str, set]:
    """Row checksums of every sink table (Delta) and of PostgreSQL sessions for this test."""
    checksum = "sha2(to_json(struct(*)), 256)"
    reads = [(name, name, checksum) for name in ("events", "duplicates", "quarantine", "sessions")]
    reads.append(("delta_sessions_text", "sessions", delta.SESSION_ROW_TEXT))
    tables: dict[str, set] = {tag: set() for tag, _, _ in reads}
    for tag, text in tagged_rows(spark, settings, reads):
        tables[tag].add(text)
    with pg, pg.cursor() as cur:
        cur.execute(f"SELECT {postgres.SESSION_ROW_TEXT} FROM sessions WHERE entity_id LIKE %s", (prefix + "%",))
        tables["postgres_sessions_text"] = {r[0] for r in cur.fetchall()}
    return tables


def tagged_rows(spark, settings: Settings, reads: list[tuple[str, str, str]]) -> list[tuple[str, Any]]:
    """``(tag, value)`` for each row of each ``(tag, table, expression)`` of ``reads``, in one query
    (their union): a check costs one Spark execution however many tables it reads."""
    from pyspark.sql import functions as F

    frames = [
        spark.read.format("delta")
        .load(settings.table_path(table))
        .select(F.lit(tag).alias("tag"), F.expr(expression).alias("value"))
        for tag, table, expression in reads
    ]
    return [(row["tag"], row["value"]) for row in union(frames[1:], frames[0]).collect()]


def assert_offset_coverage(spark, settings: Settings, committed: int) -> None:
    """Every committed record is in exactly one of events, duplicates, quarantine (invariant 1)."""
    coordinate = "to_json(struct(topic, partition, offset))"
    coordinates = [value for _, value in tagged_rows(spark, settings, [(t, t, coordinate) for t in RECORD_TABLES])]
    assert len(coordinates) == committed
    assert len(set(coordinates)) == committed


def assert_settings_sinks_agree(spark, settings: Settings, prefix: str) -> None:
    """:func:`assert_sinks_agree` over the database ``settings`` name (a test's own, from ``fresh``)."""
    from spark_jobs.db import connect

    pg = connect(settings.pipeline_dsn)
    try:
        assert_sinks_agree(snapshot(spark, settings, pg, prefix))
    finally:
        pg.close()


def assert_sinks_agree(snap: dict[str, set]) -> None:
    delta_only = sorted(snap["delta_sessions_text"] - snap["postgres_sessions_text"])
    postgres_only = sorted(snap["postgres_sessions_text"] - snap["delta_sessions_text"])
    assert not delta_only and not postgres_only, (
        f"sessions only in Delta: {delta_only}; only in PostgreSQL: {postgres_only}"
    )
    assert snap["delta_sessions_text"], "expected some sessions"


def delete_records(settings: Settings, partition: int, before: int) -> None:
    """What retention does: the broker drops the partition's records below ``before``."""
    from confluent_kafka import TopicPartition

    from spark_jobs.offsets import admin_client

    admin = admin_client(settings)
    for future in admin.delete_records([TopicPartition(settings.topic, partition, before)]).values():
        future.result(timeout=30)


def recreate_topic(settings: Settings, partitions: int, **config) -> None:
    """Delete the settings' topic and create it again under its name (its offsets start at 0 again)."""
    from spark_jobs.offsets import admin_client, ensure_topic

    admin = admin_client(settings)
    admin.delete_topics([settings.topic])[settings.topic].result(timeout=30)

    def created() -> bool:
        try:  # the broker finishes the deletion in the background: until then the name is taken
            return ensure_topic(settings, settings.topic, partitions=partitions, **config)
        except Exception:
            return False

    until(created, "the topic can be created again", timeout=60)


def send(settings: Settings, topic: str, events: list[dict], arrivals: list[datetime] | None = None) -> None:
    """Send ``events`` keyed by entity; ``arrivals`` sets their timestamps (CreateTime topics only)."""
    from confluent_kafka import Producer

    producer = Producer(settings.kafka_client_config())
    for i, event in enumerate(events):
        timestamp: dict[str, Any] = {"timestamp": int(arrivals[i].timestamp() * 1000)} if arrivals else {}
        producer.produce(topic, key=event["entity_id"].encode(), value=json.dumps(event).encode(), **timestamp)
    assert producer.flush(30) == 0


def send_to(settings: Settings, topic: str, records: list[tuple[int, str, str, datetime]]) -> None:
    """``(partition, entity_id, event_id, timestamp)`` records, each to the partition named (as a
    producer with another partitioner, or after partitions were added, would)."""
    from confluent_kafka import Producer

    producer = Producer(settings.kafka_client_config())
    for partition, entity, event_id, at in records:
        event = {"event_id": event_id, "entity_id": entity, "event_type": "view", "event_time": at.isoformat()}
        producer.produce(
            topic, key=entity.encode(), value=json.dumps(event).encode(), partition=partition,
            timestamp=int(at.timestamp() * 1000),
        )  # fmt: skip
    assert producer.flush(30) == 0


def assert_sessions_follow_events(spark, settings: Settings) -> None:
    """Delta ``sessions`` equals a from-scratch sessionization of ``events`` (ignoring row order)."""
    from pyspark.sql import functions as F

    events = spark.read.format("delta").load(settings.table_path("events"))
    assert settings.session_rules is not None, "the pipeline cuts sessions"
    expected = sessionize(events.select(*SESSIONIZE_COLUMNS), settings.session_rules)
    stored = spark.read.format("delta").load(settings.table_path("sessions")).select(*expected.columns)
    # Both sides in one query (their union: one type a column), each row as JSON with its times in
    # microseconds and their offset (Python's naive local times would make the two instants of a
    # clock change's repeated hour one), compared as multisets: what exceptAll both ways compared.
    both = expected.withColumn("_side", F.lit(0)).union(stored.withColumn("_side", F.lit(1)))
    row = F.to_json(F.struct(*expected.columns), {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"})
    sides: tuple[Counter, Counter] = (Counter(), Counter())
    for text, side in both.select(row, "_side").collect():
        sides[side][text] += 1
    missing, extra = list((sides[0] - sides[1]).elements()), list((sides[1] - sides[0]).elements())
    assert not missing and not extra, f"sessions differ from events: missing {missing[:3]}, extra {extra[:3]}"


class InjectedCrash(RuntimeError):
    pass


def crash_at(*points: str):
    """A writer fault hook that crashes the batch at each of ``points`` (see ``writer.FAULT_POINTS``)."""

    def fault(reached: str) -> None:
        if reached in points:
            raise InjectedCrash(f"injected crash {reached}")

    return fault


def stages_run(spark, group: str, work: Callable[[], T]) -> tuple[T, list]:
    """``work()`` under its own Spark job group: its result, and Spark's record (``v1.StageData``:
    ``numTasks()``, ``inputRecords()``, …) of every stage it ran (skipped stages left out)."""
    sc = spark.sparkContext
    sc.setJobGroup(group, group)
    try:
        result = work()
    finally:
        for prop in ("spark.jobGroup.id", "spark.job.description"):  # the session is shared
            sc.setLocalProperty(prop, None)
    tracker, store = sc.statusTracker(), sc._jsc.sc().statusStore()
    stages = {s for job in tracker.getJobIdsForGroup(group) for s in tracker.getJobInfo(job).stageIds}
    return result, [store.lastStageAttempt(s) for s in sorted(stages) if tracker.getStageInfo(s) is not None]


def driver_jvm_options(commands: set[tuple[str, ...]]) -> list[str]:
    """The options of the JVM that runs ``SparkSubmit`` (the driver, in client mode): what stands
    before that class on its command line (not the launcher's, nor spark-submit's own arguments)."""
    main = "org.apache.spark.deploy.SparkSubmit"
    [options] = [
        argv[: argv.index(main)]
        for argv in commands
        if os.path.basename(argv[0]) == "java" and main in argv and "org.apache.spark.launcher.Main" not in argv
    ]
    return list(options)
