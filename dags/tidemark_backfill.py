"""
### tidemark_backfill

One DAG per pipeline of ``pipelines.yaml`` (``tidemark_backfill`` for ``events``,
``tidemark_backfill__<name>`` for another). Re-process a range of the pipeline's topic, by arrival
time or by per-partition offsets, from the trigger form. The `plan` task checks the parameters
against the broker (end before start, unknown topic, offsets the broker no longer or not yet holds
all fail here, before Spark starts, saying what to fix) and prints the resolved ranges with their
committed-record counts. With **dry run** it stops there, and a plan processed before exactly is a
no-op: the `backfill` task is skipped and the plan log says so. Otherwise `backfill` processes
exactly that plan. (To repair sinks, use `tidemark_repair`.)
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from airflow.sdk import Param, dag, task

from tidemark_airflow.dag_defaults import range_params, tidemark_dag
from tidemark_airflow.operators import TidemarkSparkSubmitOperator
from tidemark_airflow.pipelines import dag_pipelines, sinks

if TYPE_CHECKING:
    from tidemark_airflow.pipelines import Pipeline, Unrunnable

# Runs that may be active at once: a form is checked when it is triggered, not after the backfill
# before it (their Spark tasks still run one at a time).
BACKFILLS_AT_ONCE = 8


def backfill_dag(pipeline: Pipeline | Unrunnable) -> None:
    """The backfill DAG of ``pipeline``."""

    @dag(
        dag_id=pipeline.names.dag_id("backfill"),
        schedule=None,
        params={
            "topic": Param(
                pipeline.topic,
                type="string",
                minLength=1,
                pattern=r"^[A-Za-z0-9._-]+$",
                title="Topic",
                description="Kafka topic to re-process.",
            ),
            **range_params("Leave empty to give offsets."),
            "dry_run": Param(False, type="boolean", title="Dry run", description="Only print the resolved plan."),
            "allow_data_loss": Param(
                False,
                type="boolean",
                title="Acknowledge records lost to retention",
                description="Only when the plan failed because Kafka's retention removed offsets of the range: skip "
                "them, record in the ledger those no table holds as lost, and process what is left.",
            ),
        },
        **tidemark_dag(__doc__, pipeline, max_active_runs=BACKFILLS_AT_ONCE),
    )
    def tidemark_backfill():
        @task(retries=0)
        def plan(params=None) -> list[str] | None:
            """Validate and resolve the form; the plan (ranges, counts) goes to this task's log."""
            import logging

            from tidemark_airflow.runs import resolve_backfill

            return resolve_backfill(params, logging.getLogger("airflow.task"), pipeline.name)

        @task.short_circuit
        def anything_to_do(arguments: list[str] | None) -> bool:
            """False for a dry run or a plan processed before: the backfill task is then skipped, not run."""
            return arguments is not None

        arguments = plan()
        backfill = TidemarkSparkSubmitOperator(
            task_id="backfill",
            job="ingest",
            pipeline=pipeline.name,
            application_args=arguments,
            outlets=[sinks(pipeline.name)],
            execution_timeout=timedelta(hours=6),
            # One backfill writes at a time; the plans of runs triggered meanwhile are checked at once.
            max_active_tis_per_dag=1,
        )
        # Airflow types a task's call with the function's own parameters, but at parse time it is given the
        # plan task's XComArg (the list it returns, resolved when the task runs).
        anything_to_do(arguments) >> backfill  # type: ignore[arg-type]

    tidemark_backfill()


for _pipeline in dag_pipelines():
    backfill_dag(_pipeline)
