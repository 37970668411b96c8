"""
### tidemark_reconcile

One DAG per pipeline of ``pipelines.yaml`` (``tidemark_reconcile`` for ``events``,
``tidemark_reconcile__<name>`` for another). After every successful ingest, backfill or repair of
the pipeline (its ``tidemark_sinks`` Asset) and daily at 03:00 UTC, prove that nothing was lost or
duplicated (``spark_jobs/reconcile/`` has the details):

* every ledger range never verified: Kafka's committed records == rows of ``events`` +
  ``duplicates`` + ``quarantine`` in it (a range whose start retention removed is *expired*);
* verified ranges whose rows a commit touched, and a rotating share of the rest (all within
  ``TIDEMARK_REVERIFY_DAYS``): still what they held when verified;
* Delta ``sessions`` == PostgreSQL ``sessions``, and == a recompute from ``events`` for the
  entities checked; no gap between consecutive scheduled batches.

``check`` does it without Spark when nothing is new; otherwise the ``reconcile`` Spark job does.
``verdict`` logs the report and, on a finding, fails with a short alert naming what is wrong,
where, and the repair (the ``tidemark_repair`` DAG or ``tidemark repair --run-id``).
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from airflow.sdk import AssetOrTimeSchedule, CronTriggerTimetable, dag, task

from tidemark_airflow.dag_defaults import tidemark_dag
from tidemark_airflow.operators import TidemarkSparkSubmitOperator, VerdictOperator
from tidemark_airflow.pipelines import dag_pipelines, sinks

if TYPE_CHECKING:
    from tidemark_airflow.pipelines import Pipeline, Unrunnable


def reconcile_dag(pipeline: Pipeline | Unrunnable) -> None:
    """The reconcile DAG of ``pipeline``."""

    @dag(
        dag_id=pipeline.names.dag_id("reconcile"),
        schedule=AssetOrTimeSchedule(
            timetable=CronTriggerTimetable("0 3 * * *", timezone="UTC"), assets=[sinks(pipeline.name)]
        ),
        **tidemark_dag(__doc__, pipeline, retry_delay=timedelta(minutes=2)),
    )
    def tidemark_reconcile():
        @task.branch
        def check(run_id=None) -> list[str]:  # Airflow passes the run id
            """Reconcile without Spark when nothing is new (then only the verdict follows)."""
            import logging

            from tidemark_airflow.operators import reconcile_without_spark

            needs_spark = reconcile_without_spark(run_id, logging.getLogger("airflow.task"), pipeline.name)
            return ["reconcile", "verdict"] if needs_spark else ["verdict"]

        reconcile = TidemarkSparkSubmitOperator(
            task_id="reconcile",
            job="reconcile",
            pipeline=pipeline.name,
            application_args=["--run-id", "{{ run_id }}", "--wait"],
            execution_timeout=timedelta(hours=1),
        )
        verdict = VerdictOperator(
            task_id="verdict", pipeline=pipeline.name, trigger_rule="none_failed_min_one_success", retries=0
        )
        decision = check()
        decision >> reconcile >> verdict
        decision >> verdict

    tidemark_reconcile()


for _pipeline in dag_pipelines():
    reconcile_dag(_pipeline)
