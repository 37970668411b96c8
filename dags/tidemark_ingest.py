"""
### tidemark_ingest

One DAG per pipeline of ``pipelines.yaml`` (``tidemark_ingest`` for ``events``,
``tidemark_ingest__<name>`` for another). On the pipeline's ``schedule`` (default
``TIDEMARK_INGEST_SCHEDULE``, every 15 minutes; cron, UTC, read when the file is parsed), process
what arrived on its topic since the last run: a trigger-once Structured Streaming run of
``spark_jobs/ingest.py`` submitted through the ``spark_default`` connection. On success it updates
the pipeline's ``tidemark_sinks`` Asset, which schedules its ``tidemark_reconcile``.

Runs made by Airflow's **Backfill** (UI, CLI or API) re-read their own data interval's arrival-time
range as one bounded batch instead; that is idempotent, so backfilling intervals that were already
processed changes nothing. Give the backfill a run conf ``{"partitions": "0,2"}`` to re-read only
those partitions.

A run fails before any work when Kafka's retention removed records it has not read yet (before the
topic's first run, or since the last run). If they are gone for good, trigger the DAG with
``allow_data_loss`` on: the run records them in the ledger as lost, continues from the first record
the broker holds, and tidemark_reconcile reports them.

Each batch reads at most ``TIDEMARK_MAX_OFFSETS_PER_TRIGGER`` records (``auto``: what the driver holds). When
runs keep failing on the same batch (out of memory, the task timeout), it was frozen too big:
trigger the DAG with ``split_frozen_batch`` on and that batch is planned again within the cap.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from airflow.sdk import CronDataIntervalTimetable, Param, dag, task

from tidemark_airflow.dag_defaults import tidemark_dag
from tidemark_airflow.operators import TidemarkSparkSubmitOperator
from tidemark_airflow.pipelines import dag_pipelines, sinks

if TYPE_CHECKING:
    from tidemark_airflow.pipelines import Pipeline, Unrunnable


def ingest_dag(pipeline: Pipeline | Unrunnable) -> None:
    """The ingest DAG of ``pipeline``."""

    @dag(
        dag_id=pipeline.names.dag_id("ingest"),
        schedule=CronDataIntervalTimetable(pipeline.schedule, timezone="UTC") if pipeline.schedule else None,
        params={
            "partitions": Param(
                "",
                type="string",
                pattern=r"^\s*([0-9]+\s*(,\s*[0-9]+\s*)*)?$",
                title="Partitions (Backfill runs only)",
                description="Runs made by Airflow's Backfill re-read only these partitions, e.g. 0,2. "
                "Empty: every partition. Scheduled runs ignore it.",
            ),
            "allow_data_loss": Param(
                False,
                type="boolean",
                title="Acknowledge records lost to retention",
                description="Only when a run failed because Kafka's retention removed records it had not read: "
                "record them in the ledger as lost and continue from the first record the broker holds.",
            ),
            "split_frozen_batch": Param(
                False,
                type="boolean",
                title="Split a batch too big to finish",
                description="Only when runs keep failing on the same batch (out of memory, timeout): plan that "
                "frozen, uncommitted batch again within TIDEMARK_MAX_OFFSETS_PER_TRIGGER records.",
            ),
        },
        **tidemark_dag(__doc__, pipeline, retries=2),
    )
    def tidemark_ingest():
        @task
        def choose_range(dag_run=None, data_interval_start=None, data_interval_end=None, params=None) -> list[str]:
            """Scheduled and manual runs: what is new. Backfill runs: the data interval's arrival range."""
            from tidemark_airflow.runs import ingest_arguments

            params = params or {}
            return ingest_arguments(
                dag_run.run_type,
                data_interval_start,
                data_interval_end,
                pipeline.topic,
                params.get("partitions"),
                bool(params.get("allow_data_loss")),
                bool(params.get("split_frozen_batch")),
            )

        TidemarkSparkSubmitOperator(
            task_id="ingest",
            job="ingest",
            pipeline=pipeline.name,
            application_args=choose_range(),
            outlets=[sinks(pipeline.name)],
            execution_timeout=timedelta(hours=2),
        )

    tidemark_ingest()


for _pipeline in dag_pipelines():
    ingest_dag(_pipeline)
