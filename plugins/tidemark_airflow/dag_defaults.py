"""What every tidemark DAG shares: one run at a time, no catch-up, retries and the failure alert."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

START_DATE = datetime(2026, 1, 1, tzinfo=UTC)


def tidemark_dag(
    doc_md: str | None,
    *,
    retries: int = 1,
    retry_delay: timedelta = timedelta(minutes=1),
    max_active_runs: int = 1,
) -> dict[str, Any]:
    """The ``@dag(...)`` arguments of a tidemark DAG, to which each adds its schedule and params.

    One run at a time unless ``max_active_runs`` says otherwise (every run takes the same writer
    lock or reads the same history), no
    catch-up (a scheduled run reads everything that arrived since the last one), ``retries`` with
    ``retry_delay`` and :class:`~tidemark_airflow.notifiers.AlertNotifier` on a task's failure.
    """
    from tidemark_airflow.notifiers import AlertNotifier

    return {
        "start_date": START_DATE,
        "catchup": False,
        "max_active_runs": max_active_runs,
        "default_args": {"retries": retries, "retry_delay": retry_delay, "on_failure_callback": AlertNotifier()},
        "tags": ["tidemark"],
        "doc_md": doc_md,
    }
