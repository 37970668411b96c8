"""Table maintenance (spark_jobs.maintenance) against real Delta tables, PostgreSQL and Kafka."""

from __future__ import annotations

import time
from dataclasses import replace

from spark_jobs import ingest, reconcile
from spark_jobs.contract import TABLE_SCHEMAS
from spark_jobs.maintenance import live_files, maintain, stored_files, vacuum
from spark_jobs.sinks.delta import fingerprint
from tests.integration.spark_jobs.checks import query, stages_run
from tidemark.producer import ProduceSpec, produce


def test_maintenance_compacts_and_vacuums_without_changing_a_row_and_prunes_old_history(spark, fresh) -> None:
    settings = fresh
    for seed in range(3):  # many small batches: many small files
        spec = ProduceSpec(count=150, entities=5, duplicate_rate=0.1, malformed_rate=0.05, seed=seed, id_prefix="m-")
        produce(settings, spec, topic=settings.topic, partitions=2)
        ingest.run_scheduled(spark, settings, max_offsets_per_trigger=50)
    assert reconcile.run(settings, "before", lambda: spark).ok
    query(
        settings,
        """INSERT INTO reconcile_runs (run_id, counted_at, status, delta_sessions, delta_sessions_checksum,
                                       postgres_sessions, postgres_sessions_checksum)
           VALUES ('long-ago', now() - interval '200 days', 'ok', 0, 0, 0, 0)""",
    )
    rows = {name: fingerprint(spark, settings, name) for name in TABLE_SCHEMAS}
    files = {name: live_files(spark, settings.table_path(name)) for name in TABLE_SCHEMAS}
    assert files["events"] > 5

    # Default retention (7 days): everything is compacted, no file young enough to be read is deleted.
    first = maintain(spark, settings)
    by_table = {t.table: t for t in first.tables}
    assert by_table["events"].files_before == files["events"] and by_table["events"].files_after < files["events"]
    assert all(t.files_vacuumed == 0 for t in first.tables)
    assert first.reconcile_runs_pruned == 1
    assert query(settings, "SELECT run_id FROM reconcile_runs ORDER BY run_id") == [("before",)]
    assert {name: fingerprint(spark, settings, name) for name in TABLE_SCHEMAS} == rows

    # With no retention (the safety check off, as only a test may), the compacted-away files go.
    spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    try:
        second = maintain(spark, replace(settings, vacuum_retain_hours=0))
    finally:
        spark.conf.unset("spark.databricks.delta.retentionDurationCheck.enabled")
    assert sum(t.files_vacuumed for t in second.tables) > 0
    for name in TABLE_SCHEMAS:
        path = settings.table_path(name)
        assert stored_files(spark, path) == live_files(spark, path)
    assert {name: fingerprint(spark, settings, name) for name in TABLE_SCHEMAS} == rows
    after = reconcile.run(settings, "after", lambda: spark)
    assert after.ok, after.summary()
    assert second.describe().splitlines()[-1] == "reconcile history: 0 runs older than the retention removed"


def test_vacuum_keeps_files_exactly_as_long_as_the_retention_setting_says(spark, fresh) -> None:
    # Delta ignores VACUUM's own retention argument unless it is 0 (a warning says to use the
    # table's delta.deletedFileRetentionDuration): the setting must reach the table.
    from datetime import UTC, datetime

    from spark_jobs.sinks.delta import ensure_tables

    settings = fresh
    ensure_tables(spark, settings)
    now = datetime.now(UTC)
    for offset in range(3):  # three small files
        row = (settings.topic, 0, offset, now, f"v-{offset}", "a", "click", now, None)
        spark.createDataFrame([row], TABLE_SCHEMAS["events"]).write.format("delta").mode("append").save(
            settings.table_path("events")
        )
    maintain(spark, settings)  # compacts them: three files are no longer referenced
    events = settings.table_path("events")
    # VACUUM lists the table in as many Spark tasks as the listing parallelism says: Spark's
    # default (10,000) made it 25 s per table on 2 cores, whatever the table's size.
    _, ran = stages_run(spark, "vacuum-tasks", lambda: vacuum(spark, events, settings.vacuum_retain_hours))
    tasks = sum(stage.numTasks() for stage in ran)
    assert ran and tasks <= 100 * spark.sparkContext.defaultParallelism, f"{tasks} tasks in {len(ran)} stages"
    stored = stored_files(spark, events)
    assert live_files(spark, events) == 1 and stored > 3, "the three appends' files stay for 7 days"
    time.sleep(3)
    second = maintain(spark, replace(settings, vacuum_retain_hours=1 / 3600))  # one second
    assert {t.table: t.files_vacuumed for t in second.tables}["events"] == stored - 1
    assert stored_files(spark, events) == live_files(spark, events) == 1
    properties = spark.sql(f"DESCRIBE DETAIL delta.`{events}`").first()["properties"]
    assert properties["delta.deletedFileRetentionDuration"] == "interval 1 seconds"
