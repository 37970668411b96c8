"""Operators: submit a tidemark Spark job, and reconcile Kafka against the sinks."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from importlib.util import find_spec
from typing import TYPE_CHECKING, Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from tidemark_airflow.connections import KAFKA_CONN_ID, POSTGRES_CONN_ID, tidemark_settings
from tidemark_airflow.hooks import KafkaOffsetsHook
from tidemark_airflow.reconcile import LedgerEntry, RangeCheck, Report, SessionsSummary, find_gaps

if TYPE_CHECKING:
    from airflow.sdk import Context

JOBS = ("ingest", "reconcile")


class TidemarkSparkSubmitOperator(SparkSubmitOperator):
    """spark-submit a tidemark job (``spark_jobs/<job>.py``) through the ``spark_default`` connection.

    The master (``local[2]``, ``spark://…``, ``k8s://…``, ``yarn``) is whatever the Spark
    connection says. At run time the job gets the ``TIDEMARK_*`` environment built from the Kafka
    and PostgreSQL connections, and the connector and Delta jars from ``TIDEMARK_JARS_DIR``.

    :param job: ``ingest`` or ``reconcile``
    :param kafka_conn_id: connection with the Kafka client options
    :param postgres_conn_id: connection to the tidemark database
    """

    def __init__(
        self,
        *,
        job: str,
        kafka_conn_id: str = KAFKA_CONN_ID,
        postgres_conn_id: str = POSTGRES_CONN_ID,
        **kwargs: Any,
    ) -> None:
        if job not in JOBS:
            raise ValueError(f"job must be one of {JOBS}, got {job!r}")
        kwargs.setdefault("name", f"tidemark-{job}")
        super().__init__(**kwargs)
        self.job = job
        self.kafka_conn_id = kafka_conn_id
        self.postgres_conn_id = postgres_conn_id

    def execute(self, context: Context) -> None:
        from spark_jobs.spark import spark_jars

        settings = tidemark_settings(self.kafka_conn_id, self.postgres_conn_id)
        self.application = self.application or find_spec(f"spark_jobs.{self.job}").origin
        self.jars = self.jars or ",".join(str(jar) for jar in spark_jars(settings))
        # Python workers and the driver run this interpreter's environment unless told otherwise.
        python = os.environ.get("PYSPARK_PYTHON", sys.executable)
        env = {"PYSPARK_PYTHON": python, **settings.to_env()}
        self.env_vars = env | dict(self.env_vars or {})  # what the task sets explicitly wins
        self.conf = {"spark.pyspark.python": python, **(self.conf or {})}
        super().execute(context)


class ReconcileOperator(BaseOperator):
    """Compare Kafka's committed records with the sinks, range by range, and fail on a mismatch.

    Reads what ``spark_jobs/reconcile.py`` recorded for this run (sink counts per unverified ledger
    range, sessions summaries of Delta and PostgreSQL), counts the committed records of each range
    in Kafka by reading them, looks for gaps between consecutive scheduled batches, stores the
    outcome in ``reconcile_runs`` / ``reconcile_ranges`` and, when anything disagrees, fails with
    a message naming the partitions and offset ranges (a failure callback sends the alert).

    :param kafka_conn_id: connection with the Kafka client options
    :param postgres_conn_id: connection to the tidemark database
    """

    template_fields: Sequence[str] = ("reconcile_run_id",)

    def __init__(
        self,
        *,
        reconcile_run_id: str = "{{ run_id }}",
        kafka_conn_id: str = KAFKA_CONN_ID,
        postgres_conn_id: str = POSTGRES_CONN_ID,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.reconcile_run_id = reconcile_run_id
        self.kafka_conn_id = kafka_conn_id
        self.postgres_conn_id = postgres_conn_id

    def execute(self, context: Context) -> dict[str, object]:
        from spark_jobs.ledger import connect

        settings = tidemark_settings(self.kafka_conn_id, self.postgres_conn_id)
        kafka = KafkaOffsetsHook(self.kafka_conn_id)
        conn = connect(settings.postgres_dsn)
        try:
            with conn, conn.cursor() as cur:
                report = self._compare(cur, kafka)
                self._store(cur, report)
        finally:
            conn.close()
        self.log.info("%s", report.summary())
        if not report.ok:
            raise AirflowFailException(report.summary())
        return {"ranges_checked": len(report.checks), "sessions": report.delta_sessions.count}

    def _compare(self, cur, kafka: KafkaOffsetsHook) -> Report:  # noqa: ANN001 - psycopg2 cursor
        run_id = self.reconcile_run_id
        cur.execute(
            """SELECT delta_sessions, delta_sessions_checksum, postgres_sessions, postgres_sessions_checksum
               FROM reconcile_runs WHERE run_id = %s""",
            (run_id,),
        )
        row = cur.fetchone()
        if row is None:
            raise AirflowFailException(
                f"no sink counts recorded for reconcile run {run_id!r}: the count_sinks task must run first"
            )
        delta = SessionsSummary(int(row[0]), int(row[1]))
        postgres = SessionsSummary(int(row[2]), int(row[3]))
        cur.execute(
            """SELECT pipeline, batch_id, topic, kafka_partition, start_offset, end_offset, sink_records
               FROM reconcile_ranges WHERE run_id = %s ORDER BY topic, kafka_partition, start_offset""",
            (run_id,),
        )
        checks = []
        for pipeline, batch_id, topic, partition, start, end, sink_records in cur.fetchall():
            committed = kafka.count_committed(topic, partition, start, end)
            checks.append(RangeCheck(pipeline, batch_id, topic, partition, start, end, sink_records, committed))
        cur.execute("SELECT pipeline, batch_id, topic, kafka_partition, start_offset, end_offset FROM ledger_ranges")
        gaps = find_gaps(LedgerEntry(*r) for r in cur.fetchall())
        return Report(run_id, checks, gaps, delta, postgres)

    def _store(self, cur, report: Report) -> None:  # noqa: ANN001
        cur.executemany(
            """UPDATE reconcile_ranges SET kafka_records = %s, matches = %s
               WHERE run_id = %s AND pipeline = %s AND batch_id = %s AND topic = %s AND kafka_partition = %s""",
            [
                (c.kafka_records, c.matches, report.run_id, c.pipeline, c.batch_id, c.topic, c.partition)
                for c in report.checks
            ],
        )
        cur.execute(
            """UPDATE reconcile_runs SET finished_at = now(), status = %s, ranges_checked = %s,
                      ranges_mismatched = %s, gaps = %s, report = %s
               WHERE run_id = %s""",
            (
                "ok" if report.ok else "mismatch",
                len(report.checks),
                len(report.mismatched),
                json.dumps([g.as_dict() for g in report.gaps]),
                report.summary(),
                report.run_id,
            ),
        )
