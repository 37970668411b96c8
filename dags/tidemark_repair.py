"""
### tidemark_repair

One DAG per pipeline of ``pipelines.yaml`` (``tidemark_repair`` for ``events``,
``tidemark_repair__<name>`` for another). Repair what a reconcile run named, and only that, then
re-check. Give the run id from the alert (empty: the latest run that found a mismatch, whose
findings hold every finding still open); the alert's link opens the tidemark page's repair form with
it filled in. ``plan`` checks it before Spark starts and logs what will be rewritten; ``repair``
(``spark_jobs/repair.py``) re-reads the named offset ranges from Kafka (records a sink holds stay as
they are), clears and rewrites ranges with extra or changed rows, recomputes the named entities'
sessions from ``events`` in both sinks, and runs a reconcile; ``verdict`` passes when that re-check
passes. Expired ranges cannot be re-read and are only reported.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from airflow.sdk import Param, dag, task

from tidemark_airflow.dag_defaults import tidemark_dag
from tidemark_airflow.operators import TidemarkSparkSubmitOperator, VerdictOperator
from tidemark_airflow.pipelines import dag_pipelines, sinks

if TYPE_CHECKING:
    from tidemark_airflow.pipelines import Pipeline, Unrunnable


def repair_dag(pipeline: Pipeline | Unrunnable) -> None:
    """The repair DAG of ``pipeline``."""

    @dag(
        dag_id=pipeline.names.dag_id("repair"),
        schedule=None,
        params={
            "reconcile_run_id": Param(
                None,
                type=["null", "string"],  # optional: the form does not mark it required
                title="Reconcile run",
                description="The tidemark_reconcile run whose findings to repair, as the alert names it. "
                "Leave empty for the latest run that found a mismatch.",
            ),
        },
        **tidemark_dag(__doc__, pipeline),
    )
    def tidemark_repair():
        @task(retries=0)
        def plan(params=None, run_id=None) -> list[str]:
            """Check the run id and log what the repair will rewrite."""
            import logging

            from tidemark_airflow.runs import repair_arguments

            return repair_arguments(params, run_id, logging.getLogger("airflow.task"), pipeline.name)

        repair = TidemarkSparkSubmitOperator(
            task_id="repair",
            job="repair",
            pipeline=pipeline.name,
            application_args=plan(),
            outlets=[sinks(pipeline.name)],
            execution_timeout=timedelta(hours=6),
        )
        repair >> VerdictOperator(task_id="verdict", repair=True, pipeline=pipeline.name, retries=0)

    tidemark_repair()


for _pipeline in dag_pipelines():
    repair_dag(_pipeline)
