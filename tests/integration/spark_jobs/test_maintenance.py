"""Table maintenance (spark_jobs.maintenance) against real Delta tables, PostgreSQL and Kafka."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import pytest

from spark_jobs import ingest, reconcile
from spark_jobs.contract import TABLE_SCHEMAS
from spark_jobs.maintenance import live_files, maintain, stored_files, vacuum
from spark_jobs.sinks.delta import fingerprint, table
from tests.integration.spark_jobs.checks import query, stages_run
from tidemark.producer import ProduceSpec, produce

pytestmark = pytest.mark.operations  # make test-operations


def test_maintenance_compacts_and_vacuums_without_changing_a_row_and_prunes_old_history(spark, fresh) -> None:
    settings = fresh
    for seed in range(2):  # many small batches (six): many small files
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

    from spark_jobs.sinks.delta_tables import ensure_tables

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


def test_a_batch_after_compaction_rewrites_only_the_sessions_it_changes(spark, fresh) -> None:
    """Compaction puts every session, open ones too, in one file. A batch that extends one open
    session must not copy that file's other sessions into a new one: that copy would grow with all
    of history and be made again by every later batch (each write's output holds the open session).
    Reconcile, after it, recomputes the sessions of the one entity the batch changed."""
    settings = fresh
    produce(settings, ProduceSpec(count=400, entities=200, seed=1, id_prefix="c-"), topic=settings.topic, partitions=1)
    ingest.run_scheduled(spark, settings)
    maintain(spark, settings)
    sessions = settings.table_path("sessions")
    assert live_files(spark, sessions) == 1
    assert reconcile.run(settings, "before", lambda: spark).ok

    # Two more events of the first entity, within its session's gap: the session is updated.
    produce(settings, ProduceSpec(count=2, entities=1, seed=2, id_prefix="c-"), topic=settings.topic, partitions=1)
    ingest.run_scheduled(spark, settings)
    # The commit's new data files hold the one changed session; the compacted file stays, its old
    # row of that session marked deleted by a deletion vector.
    version = table(spark, sessions).history(1).first()["version"]
    commit = Path(sessions, "_delta_log", f"{version:020d}.json").read_text()
    actions = [json.loads(line) for line in commit.splitlines()]
    adds = [a["add"] for a in actions if "add" in a]
    written = sum(json.loads(a["stats"])["numRecords"] for a in adds if not a.get("deletionVector"))
    assert written == 1, f"the batch wrote {written} sessions into new files for one changed session"
    assert [a["path"] for a in adds if a.get("deletionVector")], "the compacted file kept, with a deletion vector"

    after = reconcile.run(settings, "after", lambda: spark)
    assert after.ok, after.summary()
    assert after.entities_checked == 1, f"{after.entities_checked} entities recomputed for one changed session"


def test_maintenance_gives_an_older_sessions_table_deletion_vectors_and_reconcile_reads_across_the_change(
    spark, fresh
) -> None:
    """A sessions table created before tidemark set TABLE_PROPERTIES has no change data for its
    older commits: the reconcile run that spans them reads the changed files instead, and the next
    one reads the change data feed."""
    from spark_jobs.sinks.delta_tables import TABLE_PROPERTIES, create_table

    settings = fresh
    sessions = settings.table_path("sessions")
    create_table(spark, sessions, TABLE_SCHEMAS["sessions"])  # as an older tidemark did

    def ingest_more(seed: int, count: int = 200, entities: int = 50) -> None:
        spec = ProduceSpec(count=count, entities=entities, seed=seed, id_prefix="u-")
        produce(settings, spec, topic=settings.topic, partitions=1)
        ingest.run_scheduled(spark, settings)

    ingest_more(1)
    assert reconcile.run(settings, "first", lambda: spark).ok
    ingest_more(2)
    maintain(spark, settings)
    properties = table(spark, sessions).detail().first()["properties"]
    assert {key: properties.get(key) for key in TABLE_PROPERTIES["sessions"]} == TABLE_PROPERTIES["sessions"]
    ingest_more(3)
    spanning = reconcile.run(settings, "spanning", lambda: spark)  # commits before and after the change
    assert spanning.ok, spanning.summary()
    ingest_more(4, count=2, entities=1)
    after = reconcile.run(settings, "after", lambda: spark)
    assert after.ok, after.summary()
    assert after.entities_checked == 1, f"{after.entities_checked} entities recomputed for one changed entity"


def _arrival_ranges(spark, path: str) -> dict[str, tuple]:
    """Each live file's earliest and latest arrival_time (epoch microseconds)."""
    from pyspark.sql import functions as F

    rows = table(spark, path).toDF().groupBy(F.col("_metadata.file_path").alias("file"))
    first, last = F.unix_micros(F.min("arrival_time")), F.unix_micros(F.max("arrival_time"))
    return {r["file"]: (r["first"], r["last"]) for r in rows.agg(first.alias("first"), last.alias("last")).collect()}


def _files_read(df) -> int:
    """Data files a query read, once Delta skipped those its filter excludes by their statistics."""
    df.collect()
    plan = df._jdf.queryExecution().executedPlan()
    if plan.nodeName().startswith("AdaptiveSparkPlan"):
        plan = plan.executedPlan()
    leaves = plan.collectLeaves()
    scans = [node for node in (leaves.apply(i) for i in range(leaves.size())) if node.nodeName().startswith("Scan")]
    assert scans, plan.toString()
    return sum(int(node.metrics().get("numFiles").get().value()) for node in scans)


def test_compaction_leaves_full_files_alone_so_the_dedupe_horizon_skips_older_files(spark, fresh) -> None:
    """A batch looks up the stored events of its dedupe horizon: Delta skips a file whose arrival
    range is older. Delta's OPTIMIZE packs every file under 1 GiB into one, so all of history ends
    up in one file with the newest rows: every batch read all of it, and every maintenance rewrote
    it. A file of the compaction target's size stays as it is."""
    from datetime import UTC, datetime, timedelta

    from pyspark.sql import functions as F

    from spark_jobs.sinks.delta import append
    from spark_jobs.sinks.delta_tables import ensure_tables

    settings = fresh
    ensure_tables(spark, settings)
    path = settings.table_path("events")
    first_day = datetime(2026, 11, 1, tzinfo=UTC)
    offsets = iter(range(10_000))

    def batch(day: int, hour: int, count: int = 200) -> None:
        arrival = first_day + timedelta(days=day, hours=hour)
        rows = []
        for _ in range(count):
            offset = next(offsets)
            at = arrival + timedelta(seconds=offset)
            rows.append((settings.topic, 0, offset, at, f"d-{offset}", f"e-{offset % 7}", "click", at, None))
        append(spark.createDataFrame(rows, TABLE_SCHEMAS["events"]), path)

    for hour in (1, 9, 17):
        batch(0, hour)
    maintain(spark, settings)
    [(oldest, (_, day_0_ends))] = _arrival_ranges(spark, path).items()
    # The first day's file is as large as the target: full.
    full = replace(settings, compact_target_mb=table(spark, path).detail().first()["sizeInBytes"] / 1024 / 1024)

    for day in (1, 2, 3):
        for hour in (1, 9, 17):
            batch(day, hour)
    batch(0, 5, count=1)  # a takeover's earlier copy, written after the later days
    rows = fingerprint(spark, settings, "events")
    maintain(spark, full)
    ranges = _arrival_ranges(spark, path)
    assert oldest in ranges, "the full file of the first day was rewritten"
    assert fingerprint(spark, settings, "events") == rows
    assert len(ranges) < 11, f"{len(ranges)} files: the ten small ones were not compacted"

    # A batch arriving on day 3 with a one-day horizon reads only the files holding rows since day 2.
    since = int((first_day + timedelta(days=2)).timestamp() * 1_000_000)
    needed = sum(last >= since for _, last in ranges.values())
    assert needed < len(ranges) and ranges[oldest][1] == day_0_ends < since
    assert (
        _files_read(table(spark, path).toDF().where(F.col("arrival_time") >= F.timestamp_micros(F.lit(since))))
        == needed
    )
