"""The Spark side of reconciliation: what the sinks hold, per ledger range, for one reconcile run.

spark-submit entry point (the ``tidemark_reconcile`` DAG's first task)::

    spark-submit spark_jobs/reconcile.py --run-id RUN_ID

For every ledger range no earlier run verified, it counts the rows of ``events``, ``duplicates``
and ``quarantine`` whose coordinates fall in the range, and it summarises the sessions in Delta
and in PostgreSQL (count and an order-independent checksum of the rows). It holds every topic's
writer lock while it reads, so no run writes in between and the two sessions summaries describe
the same state. The results go to ``reconcile_runs`` / ``reconcile_ranges``; the Airflow side
(``plugins/tidemark_airflow``) adds Kafka's committed-record counts, compares and alerts.
"""

from __future__ import annotations

import argparse
from contextlib import ExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spark_jobs import ledger
from spark_jobs.contract import COORDINATES, RECORD_TABLES
from spark_jobs.lock import single_writer
from spark_jobs.offsets import PartitionRange
from spark_jobs.settings import Settings
from spark_jobs.sinks import delta, postgres

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class LedgerRange:
    pipeline: str
    batch_id: int
    range: PartitionRange


def unverified_ranges(cur) -> list[LedgerRange]:  # noqa: ANN001 - psycopg2 cursor
    """Ledger ranges that no reconcile run has found matching yet."""
    cur.execute(
        """SELECT l.pipeline, l.batch_id, l.topic, l.kafka_partition, l.start_offset, l.end_offset
           FROM ledger_ranges AS l
           WHERE NOT EXISTS (
               SELECT 1 FROM reconcile_ranges AS r
               WHERE r.matches AND (r.pipeline, r.batch_id, r.topic, r.kafka_partition)
                                   = (l.pipeline, l.batch_id, l.topic, l.kafka_partition))
           ORDER BY l.topic, l.kafka_partition, l.start_offset, l.pipeline, l.batch_id"""
    )
    return [LedgerRange(p, b, PartitionRange(t, k, s, e)) for p, b, t, k, s, e in cur.fetchall()]


def sink_counts(spark: SparkSession, settings: Settings, ranges: list[LedgerRange]) -> list[int]:
    """Rows of events + duplicates + quarantine inside each range (same order as ``ranges``)."""
    from pyspark.sql import functions as F

    if not ranges:
        return []
    coordinates = None
    for table in RECORD_TABLES:
        df = delta.table(spark, settings.table_path(table)).toDF().select(*COORDINATES)
        coordinates = df if coordinates is None else coordinates.unionByName(df)
    keyed = spark.createDataFrame(
        [(i, r.range.topic, r.range.partition, r.range.start, r.range.end) for i, r in enumerate(ranges)],
        "i int, r_topic string, r_partition int, r_start long, r_end long",
    )
    counted = (
        coordinates.join(
            F.broadcast(keyed),
            (F.col("topic") == F.col("r_topic"))
            & (F.col("partition") == F.col("r_partition"))
            & (F.col("offset") >= F.col("r_start"))
            & (F.col("offset") < F.col("r_end")),
        )
        .groupBy("i")
        .count()
        .collect()
    )
    by_index = {row["i"]: row["count"] for row in counted}
    return [by_index.get(i, 0) for i in range(len(ranges))]


@dataclass(frozen=True)
class SinkSummary:
    run_id: str
    ranges: int
    delta_sessions: tuple[int, int]
    postgres_sessions: tuple[int, int]


def count_sinks(spark: SparkSession, settings: Settings, run_id: str) -> SinkSummary:
    """Record what the sinks hold for every unverified range, under every topic's writer lock."""
    if not run_id:
        raise ValueError("a reconcile run needs a --run-id (Airflow passes its run_id)")
    conn = ledger.connect(settings.postgres_dsn)
    try:
        with conn, conn.cursor() as cur:
            cur.execute("SELECT DISTINCT topic FROM ledger_batches ORDER BY topic")
            topics = [row[0] for row in cur.fetchall()]
        with ExitStack() as locks:
            for topic in topics:  # sorted, so two reconcilers cannot deadlock
                locks.enter_context(single_writer(settings, topic, wait=True))
            delta.ensure_tables(spark, settings)
            with conn, conn.cursor() as cur:
                ranges = unverified_ranges(cur)
            counts = sink_counts(spark, settings, ranges)
            delta_summary = delta.sessions_summary(spark, settings)
            with conn, conn.cursor() as cur:
                postgres_summary = postgres.sessions_summary(cur)
                _record(cur, run_id, ranges, counts, delta_summary, postgres_summary)
    finally:
        conn.close()
    return SinkSummary(run_id, len(ranges), delta_summary, postgres_summary)


def _record(cur, run_id, ranges, counts, delta_summary, postgres_summary) -> None:  # noqa: ANN001
    """Write (or, for a retried task, rewrite) this run's rows."""
    cur.execute("DELETE FROM reconcile_runs WHERE run_id = %s", (run_id,))
    cur.execute(
        """INSERT INTO reconcile_runs (run_id, delta_sessions, delta_sessions_checksum, postgres_sessions,
                                       postgres_sessions_checksum)
           VALUES (%s, %s, %s, %s, %s)""",
        (run_id, *delta_summary, *postgres_summary),
    )
    cur.executemany(
        """INSERT INTO reconcile_ranges (run_id, pipeline, batch_id, topic, kafka_partition, start_offset,
                                         end_offset, sink_records)
           VALUES (%s, %s, %s, %s, %s, %s, %s, %s)""",
        [
            (run_id, r.pipeline, r.batch_id, r.range.topic, r.range.partition, r.range.start, r.range.end, n)
            for r, n in zip(ranges, counts, strict=True)
        ],
    )


def main(argv: list[str] | None = None) -> None:
    from spark_jobs.spark import build_session

    parser = argparse.ArgumentParser(description="tidemark reconciliation: count what the sinks hold")
    parser.add_argument("--run-id", required=True, help="the reconcile run (Airflow's run_id)")
    args = parser.parse_args(argv)
    settings = Settings.from_env()
    summary = count_sinks(build_session(settings, "tidemark-reconcile"), settings, args.run_id)
    print(
        f"reconcile {summary.run_id}: {summary.ranges} unverified ledger ranges counted; sessions Delta "
        f"{summary.delta_sessions[0]:,}, PostgreSQL {summary.postgres_sessions[0]:,}"
    )


if __name__ == "__main__":
    main()
