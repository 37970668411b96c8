"""
### tidemark_reconcile

After every successful ingest or backfill (the ``tidemark_sinks`` Asset) and daily at 03:00 UTC,
prove that nothing was lost or duplicated. For each ledger range not verified before, the
committed records Kafka holds (counted by reading) must equal the rows of ``events``,
``duplicates`` and ``quarantine`` in that range; Delta ``sessions`` must equal PostgreSQL
``sessions`` (count and row checksum); gaps between consecutive scheduled batches are reported.
Results go to ``reconcile_runs`` / ``reconcile_ranges`` in PostgreSQL. On a mismatch ``compare``
fails naming the partitions and offset ranges, and the alert goes to the log, the
``tidemark_alert_webhook`` connection and email when configured.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from airflow.sdk import AssetOrTimeSchedule, CronTriggerTimetable, dag

from tidemark_airflow.assets import SINKS
from tidemark_airflow.notifiers import AlertNotifier
from tidemark_airflow.operators import ReconcileOperator, TidemarkSparkSubmitOperator


@dag(
    schedule=AssetOrTimeSchedule(timetable=CronTriggerTimetable("0 3 * * *", timezone="UTC"), assets=[SINKS]),
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 1, "retry_delay": timedelta(minutes=2), "on_failure_callback": AlertNotifier()},
    tags=["tidemark"],
    doc_md=__doc__,
)
def tidemark_reconcile():
    count_sinks = TidemarkSparkSubmitOperator(
        task_id="count_sinks",
        job="reconcile",
        application_args=["--run-id", "{{ run_id }}"],
        execution_timeout=timedelta(hours=1),
    )
    # A mismatch is a finding, not a transient failure: no retry, alert at once.
    compare = ReconcileOperator(task_id="compare", retries=0)
    count_sinks >> compare


tidemark_reconcile()
