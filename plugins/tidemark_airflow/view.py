"""What the tidemark page shows: every pipeline with its verdict, lag and coverage, and per pipeline its
reconcile history, coverage and lag over time, mismatches and repairs, runs and quarantine
(``/tidemark/?pipeline=NAME``; without it, ``events`` or the first pipeline the user may see), its
repair form and each reconcile run's report. The data comes from the pipeline's own schema; the HTML
from the Jinja2 templates in ``templates/`` (:mod:`tidemark_airflow.templating`); the charts are SVG
(:mod:`tidemark_airflow.charts`), so the page needs no JavaScript and no files beyond itself. The routes,
and who may see what, are :mod:`tidemark_airflow.app`'s.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from spark_jobs.pipeline_names import DEFAULT_PIPELINE, PipelineNames
from tidemark_airflow.charts import Point, line_chart
from tidemark_airflow.metrics import run_kind
from tidemark_airflow.pipelines_list import (
    STATUS_COLOURS,
    Summary,
    pipeline_href,
    read_schema,
    read_summaries,
    render_file_problems,
    render_pipelines,
    with_lag_now,
)
from tidemark_airflow.templating import render


@dataclass(frozen=True)
class Overview:
    runs: list[tuple]  # run_id, counted_at, status, ranges_checked, mismatched, used_spark, entities, repair_of, lag
    lag: list[tuple]  # counted_at, topic, partition, behind_records, behind_seconds, processed_to, high_watermark
    coverage: list[tuple]  # topic, partition, ledger offsets, verified offsets, ranges, verified ranges, open
    #                        findings, lost offsets
    mismatches: list[tuple]  # run_id, counted_at, status, alert, repair_id, repair status, recheck_run
    findings: Sequence[tuple] = ()  # finding_id, finding, opened_by, opened_at, seen_by, closed_by, closed_at,
    #                                 closed_why
    ingest_runs: Sequence[Any] = ()  # spark_jobs.store.runs.Run, newest first
    quarantine: Sequence[Any] = ()  # spark_jobs.store.quarantine.ReasonTotal, most records first
    quarantine_samples: dict | None = None  # reason -> its latest spark_jobs.store.quarantine.Sample
    quarantine_days: Sequence[tuple] = ()  # day, reason, records
    pipeline: str = "events"  # whose page this is
    pipelines: Sequence[Summary] = ()  # every declared pipeline
    file_problems: Sequence[str] = ()  # the pipelines file's problems, one line each
    file: str = "pipelines.yaml"  # the pipelines file's path


def read_overview(cur, limit: int = 100) -> Overview:  # psycopg2 cursor
    """The overview's rows from the reconcile history (the latest ``limit`` runs), the ledger's
    coverage and the offsets lost to retention (spark_jobs/store/retention.py), per partition."""
    from spark_jobs.store import history, open_findings, quarantine, retention, runs

    reconciles = history.recent_runs(cur, limit)
    lag = history.recent_lag(cur, limit)
    coverage = history.coverage(cur)
    lost = retention.lost_per_partition(cur)
    coverage = [(*row, lost.pop((row[0], row[1]), 0)) for row in coverage]
    coverage = sorted(coverage + [(topic, partition, 0, 0, 0, 0, 0, n) for (topic, partition), n in lost.items()])
    reasons = quarantine.totals(cur)
    return Overview(
        reconciles,
        lag,
        coverage,
        open_findings.latest_findings(cur),
        open_findings.recent_findings(cur, 20),
        runs.recent(cur, limit),
        reasons,
        {r.reason: quarantine.latest_samples(cur, r.reason, quarantine.SAMPLES) for r in reasons},
        quarantine.over_time(cur, QUARANTINE_DAYS),
    )


QUARANTINE_DAYS = 30  # the quarantine chart's span


def helpers() -> dict:
    """What every template of the page uses: links within it, a pipeline's names (DAG ids, the command line's
    flag), the status colours."""
    return {
        "pipeline_href": pipeline_href,
        "repair_href": repair_href,
        "names": PipelineNames,
        "colours": STATUS_COLOURS,
    }


def render_overview(o: Overview) -> str:
    lag_records: dict[str, list[Point]] = defaultdict(list)
    lag_minutes: dict[str, list[Point]] = defaultdict(list)
    processed: dict[str, list[Point]] = defaultdict(list)
    for at, topic, partition, records, seconds, processed_to, _high in o.lag:
        name = f"{topic} p{partition}"
        lag_records[name].append(Point(at, float(records)))
        lag_minutes[name].append(Point(at, float(seconds) / 60))
        processed[name].append(Point(at, float(processed_to)))
    return render(
        "overview.html",
        o=o,
        file_problems=render_file_problems(o.file, o.file_problems),
        pipelines=render_pipelines(o.pipelines, o.pipeline) if o.pipelines else "",
        findings=render_findings(o.findings, o.pipeline),
        lag_records=line_chart("Lag behind Kafka (records)", "records", lag_records),
        lag_minutes=line_chart("Lag behind Kafka (minutes)", "min", lag_minutes),
        processed=line_chart("Processed up to (offset)", "", processed),
        ingest_runs=render_ingest_runs(o.ingest_runs),
        quarantine=render_quarantine(o.quarantine, o.quarantine_samples or {}, o.quarantine_days),
        **helpers(),
    )


def render_ingest_runs(runs: Sequence[Any]) -> str:  # spark_jobs.store.runs.Run, newest first
    """The runs (ingest, backfill, readmit, repair): what each did and how fast, as charts and a table. A readmit's
    row: the quarantined records it checked again (read), those that came back (accepted), those that stay."""
    records: dict[str, list[Point]] = defaultdict(list)
    throughput: dict[str, list[Point]] = defaultdict(list)
    for r in runs:
        for outcome, n in (("accepted", r.accepted), ("duplicates", r.duplicates), ("quarantined", r.quarantined)):
            records[outcome].append(Point(r.finished_at, float(n)))
        throughput[run_kind(r.pipeline)].append(Point(r.finished_at, r.records_per_second))
    return render(
        "ingest_runs.html",
        runs=runs,
        records_chart=line_chart("Records per run", "records", records),
        throughput_chart=line_chart("Throughput", "records/s", throughput),
        run_kind=run_kind,
        started_by=started_by,
    )


def started_by(who: str) -> str:
    """Who started a run, as HTML: an Airflow DAG run links to its page in the Airflow UI."""
    from urllib.parse import quote

    parts = who.split(" ", 2)
    if len(parts) == 3 and parts[0] == "airflow":
        _, dag, run_id = parts
        href = f"../dags/{quote(dag, safe='')}/runs/{quote(run_id, safe='')}"
        return render("started_by.html", dag_id=dag, run_id=run_id, href=href, who=who)
    return render("started_by.html", dag_id=None, run_id=None, href=None, who=who)


def render_quarantine(totals: Sequence[Any], samples: dict, days: Sequence[tuple]) -> str:
    """Quarantine by reason: per day as a chart, and per reason its count and latest sample records."""
    per_day: dict[str, list[Point]] = defaultdict(list)
    for day, reason, n in days:
        per_day[reason].append(Point(day, float(n)))
    chart = line_chart(f"Quarantined per day (last {QUARANTINE_DAYS} days)", "records", per_day)
    return render("quarantine.html", totals=totals, samples=samples, chart=chart)


def repair_href(run_id: str | None, pipeline: str) -> str:
    """The repair page of ``pipeline``'s reconcile run ``run_id``, relative to the tidemark page."""
    return pipeline_href("repair", pipeline, reconcile_run_id=run_id)


def render_findings(findings: Sequence[tuple], pipeline: str) -> str:
    """The open findings (and the latest closed ones): what is still wrong, since when, how it closed."""
    from spark_jobs.store.findings import describe

    return render("findings.html", findings=findings, pipeline=pipeline, describe=describe, **helpers())


def render_repair(run_id: str | None, plan_lines: list[str], error: str | None = None, pipeline: str = "events") -> str:
    """The repair page: what a repair of ``pipeline``'s ``run_id`` (None: the latest mismatch) would do,
    and the form that triggers the pipeline's ``tidemark_repair`` for it."""
    context = {"run_id": run_id, "plan_lines": plan_lines, "error": error, "pipeline": pipeline}
    return render("repair.html", **context, **helpers())


def render_run(run: tuple | None, ranges: list[tuple], pipeline: str = "events") -> str:
    return render("run.html", run=run, ranges=ranges, pipeline=pipeline, **helpers())


def overview_page(deployment, pipeline: str, allowed) -> str:  # Settings, the pipeline asked for, Callable
    """The tidemark page of ``pipeline`` (when empty, ``events`` or else the first pipeline the user may see) among
    the pipelines ``allowed`` says; a ``LookupError`` for one it cannot show."""
    from tidemark_airflow.listing import lag_of_each, listed, readable, settings_of

    listing = readable(listed(deployment), allowed)  # the pipeline events' topic is the deployment's
    asked = pipeline.strip()
    shown = next((p for p in listing.pipelines if p.name == (asked or DEFAULT_PIPELINE)), None)
    if shown is None and not asked:  # the page without a name: events, or the first pipeline the user may see
        shown = next(iter(listing.pipelines), None)
    name = shown.name if shown else asked or DEFAULT_PIPELINE
    if shown is None and (asked or not listing.problems):
        shows = ", ".join(p.name for p in listing.pipelines) or "none"
        raise LookupError(f"no pipeline {name!r} to show (pipelines you may see: {shows})")
    # A file with no document and no pipeline in the database yet: the banner alone says what is wrong.
    found = read_schema(read_overview, settings_of(deployment, shown)) if shown else Overview([], [], [], [])
    lags = lag_of_each(deployment, listing)
    every = [with_lag_now(s, lags[s.name]) for s in read_summaries(deployment, listing)]
    problems = {"file_problems": listing.problems, "file": listing.file}
    return render_overview(replace(found, pipeline=name, pipelines=every, **problems))
