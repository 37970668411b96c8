"""The pipelines the page and the metrics show, whatever state the pipelines file is in.

A mistake in the file is one pipeline's, not everyone's: the pipelines whose entries are good are
shown as they run; a pipeline whose entry has a problem stays listed with it (its state read from its
schema, as before the mistake); and when the file has no document at all, the pipelines are those the
tidemark database holds a schema for, each with the file's problem. The problems are said on the page
(a banner) and in the metrics (``tidemark_config_ok``, ``tidemark_pipeline_problems``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spark_jobs.pipelines import Pipeline
    from spark_jobs.settings import Settings
    from tidemark_airflow.pipelines import Unrunnable


@dataclass(frozen=True)
class Listing:
    """The pipelines to show, in the file's order, and every problem of the file (one line each)."""

    pipelines: list[Pipeline | Unrunnable]
    problems: list[str]
    file: str  # the pipelines file's path, as the banner names it


def listed(settings: Settings) -> Listing:
    """What the pipelines file of the deployment's ``settings`` declares, for the page and the metrics."""
    from spark_jobs.errors import ConfigError
    from tidemark_airflow.pipelines import unrunnable

    try:
        found = settings.declarations()
    except ConfigError as exc:  # no document: the pipelines the database knows, each with the file's problem
        lines = str(exc).splitlines()
        return Listing([_known(settings, name, lines) for name in known_pipelines(settings)], lines, _file(settings))
    return Listing([*found.pipelines, *unrunnable(found)], found.lines(), _file(settings))


def readable(listing: Listing, allowed) -> Listing:  # allowed: Callable[[str], bool]
    """``listing`` as a user ``allowed`` to see some pipelines sees it: the others, and the file's problems that
    name them, left out."""
    hidden = {p.name for p in listing.pipelines if not allowed(p.name)}
    if not hidden:
        return listing
    problems = [line for line in listing.problems if not any(f"pipeline {name!r}" in line for name in hidden)]
    return Listing([p for p in listing.pipelines if p.name not in hidden], problems, listing.file)


def settings_of(settings: Settings, pipeline: Pipeline | Unrunnable) -> Settings:
    """The deployment's ``settings`` for reading ``pipeline``'s schema (its runs are another matter)."""
    from tidemark_airflow.pipelines import Unrunnable

    if isinstance(pipeline, Unrunnable):
        return replace(settings, pipeline=pipeline.name, topic=pipeline.topic)
    return settings.for_pipeline(pipeline)


def known_pipelines(settings: Settings) -> list[str]:
    """The pipelines the tidemark database has a schema for (a ledger in it): ``events`` for ``public``."""
    from spark_jobs import db
    from spark_jobs.pipeline_names import PipelineNames

    with db.transaction(settings.postgres_dsn) as cur:
        cur.execute("SELECT table_schema FROM information_schema.tables WHERE table_name = 'ledger_batches' ORDER BY 1")
        schemas = [row[0] for row in cur.fetchall()]
    return [names.name for names in sorted(map(PipelineNames.of_schema, schemas), key=lambda n: n.sort_key)]


def _known(settings: Settings, name: str, lines: list[str]) -> Unrunnable:
    from spark_jobs.pipeline_names import PipelineNames
    from tidemark_airflow.pipelines import Unrunnable

    return Unrunnable(name, PipelineNames(name).settings_topic(settings.topic), tuple(lines))  # its entry is unread


def _file(settings: Settings) -> str:
    return str(settings.pipelines_file)


def lag_of_each(settings: Settings, listing: Listing, timeout_s: float = 2.0) -> dict:  # name -> runs.LagNow
    """Each shown pipeline's lag now (:func:`spark_jobs.store.runs.lag_now`), measured side by side so that a Kafka
    that does not answer costs one ``timeout_s``, not one per pipeline. A pipeline whose schema cannot be read
    (not migrated yet) says so as its problem."""
    from concurrent.futures import ThreadPoolExecutor
    from datetime import UTC, datetime

    import psycopg2

    from spark_jobs.errors import TidemarkError
    from spark_jobs.store.runs import LagNow, lag_now

    def measure(pipeline) -> LagNow:
        if getattr(pipeline, "problems", None) is not None:  # an Unrunnable: its topic is not known for sure
            return LagNow(datetime.now(UTC), problem="not measured: its entry in the pipelines file has a problem")
        try:
            return lag_now(settings_of(settings, pipeline), timeout_s)
        except (TidemarkError, psycopg2.Error) as exc:
            return LagNow(datetime.now(UTC), problem=str(exc).strip().splitlines()[0])

    if not listing.pipelines:
        return {}
    with ThreadPoolExecutor(max_workers=min(8, len(listing.pipelines))) as pool:
        return dict(zip((p.name for p in listing.pipelines), pool.map(measure, listing.pipelines), strict=True))
