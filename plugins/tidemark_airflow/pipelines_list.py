"""The tidemark page's list of pipelines: each pipeline's verdict, open findings, lag
(measured when the page is asked for) and coverage, read from its own schema, for the pipelines whose DAGs
Airflow lets the user read."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from urllib.parse import urlencode

STATUS_COLOURS = {"ok": "#2e7d32", "mismatch": "#c62828", "lagging": "#ef6c00", "counted": "#757575"}


@dataclass(frozen=True)
class Summary:
    """One line of the pipelines list: a pipeline's latest verdict, open findings, lag and coverage."""

    name: str
    topic: str
    verdict: tuple | None = None  # run_id, status, counted_at
    open_findings: int = 0
    behind_records: int = 0  # summed over partitions, measured when the page was asked for
    behind_seconds: float = 0.0  # the largest over partitions
    ledger_offsets: int = 0
    verified_offsets: int = 0
    problem: str | None = None  # why nothing could be read (not migrated, ...)
    lag_problem: str | None = None  # why the lag could not be measured (Kafka unreachable, ...)


def read_summary(cur, name: str, topic: str) -> Summary:  # psycopg2 cursor on the pipeline's schema
    """The pipeline's line of the list, but its lag (:func:`with_lag_now`)."""
    from spark_jobs.store import history, open_findings

    coverage = history.coverage(cur)
    return Summary(
        name,
        topic,
        history.latest_verdict(cur),
        sum(open_findings.open_findings_by_kind(cur).values()),
        ledger_offsets=sum(row[2] for row in coverage),
        verified_offsets=sum(row[3] for row in coverage),
    )


def with_lag_now(summary: Summary, now) -> Summary:  # a spark_jobs.store.runs.LagNow
    """``summary`` with the lag measured ``now``: records behind summed over partitions, the oldest's age."""
    if now.problem:
        return replace(summary, lag_problem=now.problem)
    return replace(
        summary,
        behind_records=sum(lag.behind_records for lag in now.lags),
        behind_seconds=max((lag.behind_seconds for lag in now.lags), default=0.0),
    )


def pipeline_href(path: str, pipeline: str, **params: str | None) -> str:
    """``path`` (relative to the tidemark page) for ``pipeline``, with ``params`` that are set."""
    from spark_jobs.pipeline_names import PipelineNames

    query = PipelineNames(pipeline).page_query | {k: v for k, v in params.items() if v}
    return path + (f"?{urlencode(query)}" if query else "")


def render_pipelines(summaries: Sequence[Summary], shown: str) -> str:
    """The pipelines list: each with its verdict, open findings, lag and coverage, linking to its page."""
    from tidemark_airflow.templating import render

    context = {"pipeline_href": pipeline_href, "colours": STATUS_COLOURS}
    return render("pipelines.html", summaries=summaries, shown=shown, **context)


def render_file_problems(file: str, problems: Sequence[str]) -> str:
    """The banner of a pipelines file with problems: each line (file, line, pipeline, field, what is wrong)."""
    from tidemark_airflow.templating import render

    return render("file_problems.html", file=file, problems=problems)


def read_schema(read, settings):  # Settings
    from spark_jobs import db

    with db.transaction(settings.pipeline_dsn) as cur:
        return read(cur)


def each_pipeline(settings, read, failed=None, listing=None) -> list:  # Settings, listing.Listing
    """``read(cur, pipeline)`` of every pipeline :func:`~tidemark_airflow.listing.listed` shows (with a problem
    or not), each on its own schema; for a pipeline that cannot be read (not migrated yet, ...)
    ``failed(pipeline, error)``, or nothing."""
    from spark_jobs.errors import TidemarkError
    from tidemark_airflow.listing import listed, settings_of

    found = []
    for pipeline in (listing or listed(settings)).pipelines:
        try:
            found.append(read_schema(lambda cur, p=pipeline: read(cur, p), settings_of(settings, pipeline)))
        except TidemarkError as exc:
            if failed is not None:
                found.append(failed(pipeline, exc))
    return found


def read_summaries(settings, listing=None) -> list[Summary]:  # Settings, listing.Listing
    """A :class:`Summary` of every pipeline the page shows (or why it cannot be read, or cannot run)."""

    def read(cur, p) -> Summary:
        summary = read_summary(cur, p.name, p.topic)
        problems = getattr(p, "problems", ())
        return replace(summary, problem=f"cannot run: {' '.join(problems)}") if problems else summary

    def failed(p, exc) -> Summary:
        problems = getattr(p, "problems", ())
        return Summary(p.name, p.topic, problem=f"cannot run: {' '.join(problems)}" if problems else str(exc))

    return each_pipeline(settings, read, failed, listing)
