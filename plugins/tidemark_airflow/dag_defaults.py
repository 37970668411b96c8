"""What every tidemark DAG shares: one run at a time, no catch-up, retries and the failure alert."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spark_jobs.pipelines import Pipeline
    from tidemark_airflow.pipelines import Unrunnable

START_DATE = datetime(2026, 1, 1, tzinfo=UTC)


def tidemark_dag(
    doc_md: str | None,
    pipeline: Pipeline | Unrunnable,
    *,
    retries: int = 1,
    retry_delay: timedelta = timedelta(minutes=1),
    max_active_runs: int = 1,
) -> dict[str, Any]:
    """The ``@dag(...)`` arguments of a tidemark DAG of ``pipeline``, to which each adds its schedule and params.

    One run at a time unless ``max_active_runs`` says otherwise (every run takes the same writer
    lock or reads the same history), no
    catch-up (a scheduled run reads everything that arrived since the last one), ``retries`` with
    ``retry_delay``, the pipeline's alert (:func:`~tidemark_airflow.pipelines.alert_notifier`) on a
    task's failure, and the tags ``tidemark`` and the pipeline's name. The doc of an :class:`Unrunnable`
    pipeline's DAG starts with its problem.
    """
    from tidemark_airflow.pipelines import alert_notifier

    problems = getattr(pipeline, "problems", ())
    banner = "".join(
        ["**Every run of this pipeline fails until its entry in the pipelines file is fixed:**\n\n"]
        + [f"- `{line}`\n" for line in problems]
        + ["\n"]
    ) if problems else ""  # fmt: skip

    return {
        "start_date": START_DATE,
        "catchup": False,
        "max_active_runs": max_active_runs,
        "default_args": {
            "retries": retries,
            "retry_delay": retry_delay,
            "on_failure_callback": alert_notifier(pipeline),
        },
        "tags": ["tidemark", pipeline.name],
        "doc_md": f"{banner}Pipeline **{pipeline.name}**, topic `{pipeline.topic}`.\n\n{doc_md or ''}",
    }


def range_params(either: str) -> dict[str, Any]:
    """A form's arrival-time range and per-partition offsets (the backfill's and the readmit's);
    ``either`` says what leaving the times empty means."""
    from airflow.sdk import Param

    return {
        "from_time": Param(
            None,
            type=["null", "string"],
            format="date-time",
            title="From (arrival time)",
            description=f"Start of the arrival-time range, inclusive, in UTC (the picker's time is UTC). {either}",
        ),
        "to_time": Param(
            None,
            type=["null", "string"],
            format="date-time",
            title="To (arrival time)",
            description="End of the arrival-time range, exclusive, in UTC.",
        ),
        "offsets": Param(
            None,
            type=["null", "string"],  # checked by the plan task, which says how to write them
            title="Offsets",
            description="Instead of times: PARTITION:START-END per partition, END exclusive, e.g. 0:100-200,1:0-50.",
        ),
    }


def reason_codes(pipeline: object = None) -> list[str]:
    """The quarantine reasons' codes, which the readmit form of ``pipeline`` offers
    (``spark_jobs.store.quarantine.REASON_CODES``; an Avro pipeline's own codes first)."""
    from spark_jobs.store.quarantine import AVRO_REASON_CODES, REASON_CODES

    contract = getattr(pipeline, "contract", None)  # an Unrunnable pipeline has none
    return [*(AVRO_REASON_CODES if contract is not None and contract.avro else ()), *REASON_CODES]
