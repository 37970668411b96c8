"""
### tidemark_maintenance

One DAG per pipeline of ``pipelines.yaml`` (``tidemark_maintenance`` for ``events``,
``tidemark_maintenance__<name>`` for another). Daily (``TIDEMARK_MAINTENANCE_SCHEDULE``, a cron
expression, UTC), keep the pipeline's tables and its ledger database as fast in month six as in week
one: ``spark_jobs/maintenance.py`` compacts each Delta table's files smaller than
``TIDEMARK_COMPACT_TARGET_MB`` (128) into files of up to that size (``OPTIMIZE``, holding the writer
lock one table at a time, so an ingest waits for one table at most; a full file is never rewritten,
so neither is all of history), writes a Delta log checkpoint, VACUUMs files no version younger than
``TIDEMARK_VACUUM_RETAIN_HOURS`` (168) needs, and prunes reconcile history older than
``TIDEMARK_HISTORY_DAYS`` (90). No row changes: compaction rewrites files, not data, and reconcile
passes after it as before.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import TYPE_CHECKING

from airflow.sdk import CronDataIntervalTimetable, dag

from tidemark_airflow.dag_defaults import tidemark_dag
from tidemark_airflow.operators import TidemarkSparkSubmitOperator
from tidemark_airflow.pipelines import dag_pipelines

if TYPE_CHECKING:
    from tidemark_airflow.pipelines import Pipeline, Unrunnable

SCHEDULE = os.environ.get("TIDEMARK_MAINTENANCE_SCHEDULE", "30 3 * * *")


def maintenance_dag(pipeline: Pipeline | Unrunnable) -> None:
    """The maintenance DAG of ``pipeline``."""

    @dag(
        dag_id=pipeline.names.dag_id("maintenance"),
        schedule=CronDataIntervalTimetable(SCHEDULE, timezone="UTC"),
        **tidemark_dag(__doc__, pipeline, retry_delay=timedelta(minutes=5)),
    )
    def tidemark_maintenance():
        TidemarkSparkSubmitOperator(
            task_id="maintain", job="maintenance", pipeline=pipeline.name, execution_timeout=timedelta(hours=4)
        )

    tidemark_maintenance()


for _pipeline in dag_pipelines():
    maintenance_dag(_pipeline)
