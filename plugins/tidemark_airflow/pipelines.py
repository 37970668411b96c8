"""The pipelines the DAG files generate DAGs for: one set of DAGs per pipeline ``pipelines.yaml`` declares.

Each file of ``dags/`` makes one kind of DAG (ingest, backfill, reconcile, repair, maintenance) for
every pipeline, in a loop over :func:`dag_pipelines`: Airflow's way of generating DAGs from a
configuration file. The file is read when a DAG file is parsed, so that stays cheap: YAML and the
contracts' JSON Schemas, no Spark, no broker, no database. A pipeline whose entry has a problem (its
YAML included) keeps its DAGs as an :class:`Unrunnable`: their doc starts with the problem, and every
task that would run the pipeline fails at once with it; ``dags/tidemark_pipelines.py`` fails to import
with the problem's lines, so Airflow lists them under its import errors, while the DAGs of the other
pipelines load and run from what their entries say.

The pipeline ``events`` keeps the DAG ids a deployment made before pipelines has (``tidemark_ingest``,
...), as it keeps its tables; another pipeline's are suffixed with its name (``tidemark_ingest__web``):
``pipeline.names.dag_id(kind)`` (:class:`~spark_jobs.pipeline_names.PipelineNames`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from spark_jobs.pipeline_names import PipelineNames
from spark_jobs.pipeline_options import DEFAULT_SCHEDULE, Alerts

if TYPE_CHECKING:
    from airflow.sdk import Asset

    from spark_jobs.pipelines import Pipeline
    from spark_jobs.pipelines_check import Declared
    from tidemark_airflow.notifiers import AlertNotifier


def declared() -> Declared:
    """What the pipelines file of this component's settings declares, entry by entry. A pipeline that names
    no schedule runs on ``TIDEMARK_INGEST_SCHEDULE`` (default every 15 minutes, UTC)."""
    from spark_jobs.settings import Settings

    return Settings.from_env().declarations()


@dataclass(frozen=True)
class Unrunnable:
    """A pipeline the file declares with a problem, as its DAGs, page row and metrics show it: its name, the
    topic its name would read, the deployment's schedule and alerts, and the problem's lines."""

    name: str
    topic: str
    problems: tuple[str, ...]
    schedule: str | None = DEFAULT_SCHEDULE
    alerts: Alerts = field(default_factory=Alerts)

    @property
    def names(self) -> PipelineNames:
        """Where the pipeline's state lives and what its parts (DAGs, locks, ...) are called."""
        return PipelineNames(self.name)


def unrunnable(found: Declared) -> list[Unrunnable]:
    """The pipelines ``found`` declares with a problem (:meth:`~spark_jobs.pipelines_check.Declared.broken`)."""
    from spark_jobs.settings import Settings

    deployment = Settings.from_env()

    def topic(name: str) -> str:  # the topic its entry names where it could be read; else the one it would have
        return PipelineNames(name).topic(found.topics.get(name), deployment.topic)

    return [
        Unrunnable(name, topic(name), tuple(found.problems_of(name)), deployment.ingest_schedule)
        for name in found.broken()
    ]


def dag_pipelines() -> list[Pipeline | Unrunnable]:
    """The pipelines to make DAGs for: those without a problem, and those with one as :class:`Unrunnable` (their
    runs fail with it). A file that cannot be read at all gives none (``dags/tidemark_pipelines.py`` says why)."""
    from spark_jobs.errors import ConfigError

    try:
        found = declared()
    except ConfigError:
        return []
    return [*found.pipelines, *unrunnable(found)]


def raise_problems() -> None:
    """Raise the pipelines file's problems, one line each (a :class:`~spark_jobs.pipelines_check.PipelinesError`),
    if it has any: ``dags/tidemark_pipelines.py`` does, so that Airflow lists them among its import errors."""
    from spark_jobs.errors import ConfigError
    from spark_jobs.pipelines_check import PipelinesError

    try:
        problems = declared().lines()
    except ConfigError as exc:  # the file as a whole: missing, not YAML, not a list of pipelines
        problems = str(exc).splitlines()
    if problems:
        raise PipelinesError(problems)


def sinks(pipeline: str) -> Asset:
    """The Asset a successful ingest, backfill or repair of ``pipeline`` updates; its reconcile is scheduled on it."""
    from airflow.sdk import Asset

    name, uri = PipelineNames(pipeline).asset
    return Asset(name=name, uri=uri)


def alert_notifier(pipeline: Pipeline | Unrunnable) -> AlertNotifier:
    """The notifier of ``pipeline``'s alerts: its webhook connection and addresses, or the deployment's."""
    from tidemark_airflow.notifiers import WEBHOOK_CONN_ID, AlertNotifier

    return AlertNotifier(
        webhook_conn_id=pipeline.alerts.webhook or WEBHOOK_CONN_ID,
        email=pipeline.alerts.email or None,
    )
