"""
### tidemark_readmit

One DAG per pipeline of ``pipelines.yaml`` (``tidemark_readmit`` for ``events``,
``tidemark_readmit__<name>`` for another). Bring back quarantined records that the pipeline's
contract accepts now, after a fix of the contract (``pipelines.yaml``) for a producer's new
release. Narrow the records by quarantine reason (its code, e.g. ``schema``, or the start of its
text as the tidemark page and ``tidemark quarantine`` list it), by arrival time or by offsets, or
leave all empty for every quarantined record. With **dry run** the ``readmit`` task only logs, per
reason, how many records would come back. Otherwise ``readmit`` (``spark_jobs/readmit.py``) writes
them as one batch, as if they had been accepted at arrival: first arrivals of their event ids to
``events``, later copies to ``duplicates``, their entities' sessions recomputed in both sinks; then
the pipeline's reconcile runs. Records the contract still refuses stay quarantined with their reason.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from airflow.sdk import Param, dag, task

from tidemark_airflow.dag_defaults import range_params, reason_codes, tidemark_dag
from tidemark_airflow.operators import TidemarkSparkSubmitOperator
from tidemark_airflow.pipelines import dag_pipelines, sinks

if TYPE_CHECKING:
    from tidemark_airflow.pipelines import Pipeline, Unrunnable


def readmit_dag(pipeline: Pipeline | Unrunnable) -> None:
    """The readmit DAG of ``pipeline``."""

    @dag(
        dag_id=pipeline.names.dag_id("readmit"),
        schedule=None,
        params={
            "reason": Param(
                None,
                type=["null", "string"],
                title="Quarantine reason",
                description="Only records quarantined with this reason: its code (a choice here), or the start of "
                "its text as the tidemark page lists it (e.g. 'schema: enum at /status'). Leave empty for every "
                "reason. One that selects nothing fails before Spark starts, listing the reasons there are.",
                examples=reason_codes(pipeline),
            ),
            **range_params("Leave the times and offsets empty for any arrival."),
            "dry_run": Param(
                False, type="boolean", title="Dry run", description="Only log per reason what would come back."
            ),
        },
        **tidemark_dag(__doc__, pipeline),
    )
    def tidemark_readmit():
        @task(retries=0)
        def plan(params=None, run_id=None) -> list[str]:
            """Check the form before Spark starts; the readmit job's arguments."""
            import logging

            from tidemark_airflow.runs import readmit_arguments, refuse_unmatched_reason

            log = logging.getLogger("airflow.task")
            arguments = readmit_arguments(params, run_id, log, pipeline.name)
            refuse_unmatched_reason(params, log, pipeline.name)  # a reason that selects nothing, with those there are
            return arguments

        TidemarkSparkSubmitOperator(
            task_id="readmit",
            job="readmit",
            pipeline=pipeline.name,
            application_args=plan(),
            outlets=[sinks(pipeline.name)],
            execution_timeout=timedelta(hours=6),
        )

    tidemark_readmit()


for _pipeline in dag_pipelines():
    readmit_dag(_pipeline)
