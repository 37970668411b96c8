"""Table maintenance: what keeps months of 15-minute runs as fast as the first week.

Every batch commits a few small files to each Delta table and a reconcile run's rows to
PostgreSQL. Nothing else ever removes them, so :func:`maintain` (the ``tidemark_maintenance`` DAG,
``tidemark maintain``) does, per Delta table:

1. **compaction** (``OPTIMIZE``): files smaller than ``TIDEMARK_COMPACT_TARGET_MB`` (128) rewritten
   into files of up to that size; a file of that size is not rewritten (:func:`compact`). So a
   maintenance rewrites what the batches since the last one wrote and the few files not full yet,
   not all of history; and the rows of older files are never packed into one file with
   new ones, which keeps Delta's per-file ``arrival_time`` ranges apart: a batch's dedupe lookup
   reads the files of its horizon and skips the others. It holds the writer lock, one table at a
   time: a batch's MERGE that read files a compaction removed would fail and be retried, so the two
   do not overlap; a waiting ingest waits one table's compaction at most;
2. **a log checkpoint**, so readers replay a short log instead of every commit since the last one;
3. **VACUUM** of files no version younger than ``TIDEMARK_VACUUM_RETAIN_HOURS`` (168, Delta's
   default) still needs. Delta takes the retention from the table's
   ``delta.deletedFileRetentionDuration`` (it ignores VACUUM's own argument unless it is 0), so the
   setting is written there, under the lock, when it differs (with the properties a table created
   by an older tidemark lacks: ``sinks.delta_tables.TABLE_PROPERTIES``). No run reads a
   version that old: a batch plans from the tables' latest versions and commits within minutes,
   reconcile pins the versions it checks for as long as its run lasts, and replays re-read Kafka,
   not Delta history. Needs no lock: it deletes only files no live version references.

and in PostgreSQL prunes reconcile history (runs, their ranges and lags, and the repairs of them)
older than ``TIDEMARK_HISTORY_DAYS`` (90), always keeping the latest run. The ledger is never pruned:
its ranges are what reconcile proves coverage (and finds gaps) with, a row per batch and partition.

spark-submit entry point: ``spark-submit spark_jobs/maintenance.py``.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spark_jobs import db, jvm
from spark_jobs.contract import TABLE_SCHEMAS
from spark_jobs.errors import run_job
from spark_jobs.settings import Settings
from spark_jobs.sinks import delta, delta_tables
from spark_jobs.store.lock import single_writer

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

PIPELINE = "maintenance"


@dataclass(frozen=True)
class TableMaintenance:
    table: str
    files_before: int
    files_after: int  # live data files once compacted
    files_vacuumed: int  # files deleted from storage


@dataclass(frozen=True)
class MaintenanceReport:
    tables: list[TableMaintenance]
    reconcile_runs_pruned: int

    def describe(self) -> str:
        lines = [
            f"{t.table}: {t.files_before:,} data files compacted into {t.files_after:,}; "
            f"{t.files_vacuumed:,} unreferenced files removed"
            for t in self.tables
        ]
        lines.append(f"reconcile history: {self.reconcile_runs_pruned:,} runs older than the retention removed")
        return "\n".join(lines)


def live_files(spark: SparkSession, path: str) -> int:
    """Data files the table's latest version references."""
    return int(delta.table(spark, path).detail().first()["numFiles"])


def stored_files(spark: SparkSession, path: str) -> int:
    """Files in storage under the table outside its log (referenced or not: data files, deletion
    vectors, change data), counted by Hadoop's FileSystem in the JVM in one call per folder tree.
    Walking them from Python cost a few milliseconds a file: with a month of commits in the log,
    minutes a maintenance."""
    return jvm.file_count(spark, path) - jvm.file_count(spark, f"{path.rstrip('/')}/_delta_log")


# Delta's OPTIMIZE: files smaller than the first are compacted into files of up to the second
# (both 1 GiB by default: a table smaller than that was rewritten whole by every maintenance).
COMPACTION_SIZES = ("spark.databricks.delta.optimize.minFileSize", "spark.databricks.delta.optimize.maxFileSize")


def compact(spark: SparkSession, path: str, target_bytes: int) -> None:
    """OPTIMIZE the table: its files smaller than ``target_bytes`` are packed into files of up to
    ``target_bytes``; larger files stay as they are. Delta packs the small files in order of size,
    so a compaction mixes only the files written since the last one and those not full yet. (A
    file whose deletion vectors mark more than a twentieth of its rows deleted, in ``sessions``, may be
    packed with others whatever its size, which drops those rows.)"""
    previous = {key: spark.conf.get(key, None) for key in COMPACTION_SIZES}
    for key in COMPACTION_SIZES:
        spark.conf.set(key, str(target_bytes))
    try:
        delta.table(spark, path).optimize().executeCompaction()
    finally:
        for key, value in previous.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def checkpoint(spark: SparkSession, path: str) -> None:
    """Write a Delta log checkpoint of the table's latest version."""
    jvm.checkpoint_delta_log(spark, path)


def maintain(spark: SparkSession, settings: Settings, wait: bool = True) -> MaintenanceReport:
    """Compact, checkpoint and vacuum every sink table, then prune reconcile history."""
    delta_tables.ensure_tables(spark, settings)
    done = []
    for name in TABLE_SCHEMAS:
        path = settings.table_path(name)
        with single_writer(settings, f"{PIPELINE}:{name}", wait):
            before = live_files(spark, path)
            compact(spark, path, settings.compact_target_bytes)
            after = live_files(spark, path)
            set_properties(spark, path, wanted_properties(name, settings.vacuum_retain_hours))
        checkpoint(spark, path)
        stored = stored_files(spark, path)
        vacuum(spark, path, settings.vacuum_retain_hours)
        done.append(TableMaintenance(name, before, after, stored - stored_files(spark, path)))
    return MaintenanceReport(done, prune_history(settings))


def vacuum(spark: SparkSession, path: str, retain_hours: float) -> None:
    """VACUUM the table: delete the files no version within the table's retention references. Its
    listing runs in as many Spark tasks as ``spark.build_session`` allows (a few per core)."""
    # Delta ignores VACUUM's retention argument unless it is 0: the table property is the setting.
    with jvm.console_silenced(spark):
        delta.table(spark, path).vacuum(0.0 if retain_hours == 0 else None)


RETENTION_PROPERTY = "delta.deletedFileRetentionDuration"


def wanted_properties(name: str, retain_hours: float) -> dict[str, str]:
    """The properties table ``name`` must have: :data:`~spark_jobs.sinks.delta_tables.TABLE_PROPERTIES` (a
    table created before one of them gets it here), and the retention VACUUM obeys: files the table
    no longer references are kept ``retain_hours`` (0 leaves the property alone; VACUUM is then told
    0 itself)."""
    wanted = dict(delta_tables.TABLE_PROPERTIES.get(name, {}))
    if retain_hours > 0:
        wanted[RETENTION_PROPERTY] = f"interval {round(retain_hours * 3600)} seconds"
    return wanted


def set_properties(spark: SparkSession, path: str, wanted: dict[str, str]) -> None:
    """Set the ``wanted`` properties the table does not have yet, in one commit (so under the writer lock)."""
    current = delta.table(spark, path).detail().first()["properties"]
    missing = {key: value for key, value in wanted.items() if current.get(key) != value}
    if missing:
        assignments = ", ".join(f"'{key}' = '{value}'" for key, value in sorted(missing.items()))
        spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ({assignments})")


def prune_history(settings: Settings) -> int:
    """Delete reconcile runs older than ``settings.history_days`` (their ranges, lags and repairs go
    with them), keeping the latest run, which the next reconcile compares itself with."""
    from spark_jobs.store import history

    with db.transaction(settings.pipeline_dsn) as cur:
        return history.prune(cur, settings.history_days)


def main(argv: list[str] | None = None) -> None:
    from spark_jobs.spark import build_session
    from spark_jobs.store.ledger import stored_records

    argparse.ArgumentParser(description="tidemark table maintenance").parse_args(argv)
    settings = Settings.from_env().for_run()  # its pipeline and topic, before any work
    spark = build_session(settings, "tidemark-maintenance", stored_records(settings))
    print(maintain(spark, settings).describe())


if __name__ == "__main__":
    run_job(main)
