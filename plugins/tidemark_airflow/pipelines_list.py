"""The tidemark page's list of pipelines: each pipeline's verdict, open findings, lag
(measured when the page is asked for) and coverage, read from its own schema, for the pipelines whose DAGs
Airflow lets the user read."""

from __future__ import annotations

import html
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
    from spark_jobs.reconcile import history

    coverage = history.coverage(cur)
    return Summary(
        name,
        topic,
        history.latest_verdict(cur),
        sum(history.open_findings_by_kind(cur).values()),
        ledger_offsets=sum(row[2] for row in coverage),
        verified_offsets=sum(row[3] for row in coverage),
    )


def with_lag_now(summary: Summary, now) -> Summary:  # a spark_jobs.runs.LagNow
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
    from spark_jobs.settings import DEFAULT_PIPELINE

    query = {"pipeline": pipeline} if pipeline != DEFAULT_PIPELINE else {}
    query |= {k: v for k, v in params.items() if v}
    return path + (f"?{urlencode(query)}" if query else "")


def render_pipelines(summaries: list[Summary], shown: str) -> str:
    """The pipelines list: each with its verdict, open findings, lag and coverage, linking to its page."""
    e = html.escape
    rows = [
        '<h3>Pipelines</h3><table id="pipelines"><tr><th>pipeline</th><th>topic</th><th>verdict</th>'
        "<th class=num>open findings</th><th class=num>behind Kafka (records)</th><th class=num>behind (min)</th>"
        "<th class=num>verified / ledger offsets</th></tr>"
    ]
    for s in summaries:
        name = f"<b>{e(s.name)}</b>" if s.name == shown else e(s.name)
        link = f'<a class="pipeline" href="{e(pipeline_href("./", s.name))}">{name}</a>'
        if s.problem:
            rows.append(f'<tr><td>{link}</td><td>{e(s.topic)}</td><td colspan="5">{e(s.problem)}</td></tr>')
            continue
        status = s.verdict[1] if s.verdict else "no reconcile yet"
        colour = STATUS_COLOURS.get(status, "#222")
        behind = (
            f'<td colspan="2" class="lag-problem" title="{e(s.lag_problem)}">Kafka unreachable</td>'
            if s.lag_problem
            else f"<td class=num>{s.behind_records:,}</td><td class=num>{s.behind_seconds / 60:,.1f}</td>"
        )
        rows.append(
            f'<tr><td>{link}</td><td>{e(s.topic)}</td><td class="status verdict" style="color:{colour}">'
            f"{e(status.upper() if s.verdict else status)}</td><td class=num>{s.open_findings:,}</td>{behind}"
            f"<td class=num>{s.verified_offsets:,} / {s.ledger_offsets:,}</td></tr>"
        )
    return "".join(rows) + "</table>"


def render_file_problems(file: str, problems: list[str]) -> str:
    """The banner of a pipelines file with problems: each line (file, line, pipeline, field, what is wrong)."""
    if not problems:
        return ""
    e = html.escape
    lines = "".join(f"<li><code>{e(line)}</code></li>" for line in problems)
    return (
        f'<div id="file-problems" class="banner"><b>The pipelines file {e(file)} has problems.</b> A pipeline whose '
        "entry is named below cannot run until it is fixed (its runs fail with the line); every other pipeline runs "
        f"on as its entry says. <code>tidemark pipelines check</code> gives the same lines.<ul>{lines}</ul></div>"
    )


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
