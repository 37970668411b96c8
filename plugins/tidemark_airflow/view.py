"""The tidemark page inside the Airflow UI: every pipeline with its verdict, lag and coverage, and per
pipeline its reconcile history, coverage and lag over time, mismatches and repairs, ingest runs and
quarantine (``/tidemark/?pipeline=NAME``; without it, the pipeline ``events``).

A FastAPI app that ``plugins/tidemark_plugin.py`` mounts on Airflow's api-server at ``/tidemark``
and adds to the UI's navigation. It reads the tidemark database through the ``tidemark_postgres``
connection; every page needs an Airflow login (the UI's session cookie or a bearer token) and the
permission to read the custom view ``Tidemark`` (its reports name entity ids): an auth manager
with roles (FAB's) grants it per role, Airflow's simple auth manager to every role. Within it a user
sees the pipelines whose DAGs Airflow lets them read (:mod:`tidemark_airflow.access`). The
charts are SVG (:mod:`tidemark_airflow.charts`), so the page needs no JavaScript and no files beyond
itself.
"""

from __future__ import annotations

import html
from collections import defaultdict
from dataclasses import dataclass, replace

# FastAPI reads a route's annotations from this module's globals (they are strings here).
from fastapi import Request

from tidemark_airflow.access import RESOURCE, everything, may_read, pipeline_access, register_view
from tidemark_airflow.charts import Point, line_chart
from tidemark_airflow.metrics import run_kind, scrape
from tidemark_airflow.pipelines import dag_id
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


@dataclass(frozen=True)
class Overview:
    runs: list[tuple]  # run_id, counted_at, status, ranges_checked, mismatched, used_spark, entities, repair_of, lag
    lag: list[tuple]  # counted_at, topic, partition, behind_records, behind_seconds, processed_to, high_watermark
    coverage: list[tuple]  # topic, partition, ledger offsets, verified offsets, ranges, verified ranges, open
    #                        findings, lost offsets
    mismatches: list[tuple]  # run_id, counted_at, status, alert, repair_id, repair status, recheck_run
    findings: list[tuple] = ()  # finding_id, finding, opened_by, opened_at, seen_by, closed_by, closed_at, closed_why
    ingest_runs: list = ()  # spark_jobs.runs.Run, newest first
    quarantine: list = ()  # spark_jobs.quarantine.ReasonTotal, most records first
    quarantine_samples: dict | None = None  # reason -> its latest spark_jobs.quarantine.Sample
    quarantine_days: list[tuple] = ()  # day, reason, records
    pipeline: str = "events"  # whose page this is
    pipelines: list[Summary] = ()  # every declared pipeline
    file_problems: list[str] = ()  # the pipelines file's problems, one line each
    file: str = "pipelines.yaml"  # the pipelines file's path


def read_overview(cur, limit: int = 100) -> Overview:  # psycopg2 cursor
    """The overview's rows from the reconcile history (the latest ``limit`` runs), the ledger's
    coverage and the offsets lost to retention (spark_jobs/retention.py), per partition."""
    from spark_jobs import quarantine, retention, runs
    from spark_jobs.reconcile import history

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
        history.latest_findings(cur),
        history.recent_findings(cur, 20),
        runs.recent(cur, limit),
        reasons,
        {r.reason: quarantine.latest_samples(cur, r.reason, quarantine.SAMPLES) for r in reasons},
        quarantine.over_time(cur, QUARANTINE_DAYS),
    )


QUARANTINE_DAYS = 30  # the quarantine chart's span


PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>{title}</title><style>
body{{font-family:system-ui,sans-serif;margin:16px;color:#222}} table{{border-collapse:collapse;margin:8px 0 20px}}
td,th{{border-bottom:1px solid #ddd;padding:4px 10px;text-align:left;font-size:13px}} th{{background:#f5f5f5}}
.status{{font-weight:600}} figure{{display:inline-block;margin:0 24px 16px 0}} figcaption{{font-weight:600}}
pre{{background:#f7f7f7;padding:10px;white-space:pre-wrap}} .legend{{font-size:12px}} .num{{text-align:right}}
</style></head><body>{body}</body></html>"""


def render_overview(o: Overview) -> str:
    e = html.escape
    lag_records: dict[str, list[Point]] = defaultdict(list)
    lag_minutes: dict[str, list[Point]] = defaultdict(list)
    processed: dict[str, list[Point]] = defaultdict(list)
    for at, topic, partition, records, seconds, processed_to, _high in o.lag:
        name = f"{topic} p{partition}"
        lag_records[name].append(Point(at, float(records)))
        lag_minutes[name].append(Point(at, float(seconds) / 60))
        processed[name].append(Point(at, float(processed_to)))

    def run_href(run_id: str) -> str:
        return e(pipeline_href(f"runs/{run_id}", o.pipeline))

    body = ["<h2>tidemark</h2>", render_file_problems(o.file, o.file_problems)]
    if o.pipelines:
        body.append(render_pipelines(o.pipelines, o.pipeline))
    body.append(f'<h2 id="pipeline">Pipeline {e(o.pipeline)}</h2>')
    latest = o.runs[0] if o.runs else None
    if latest:
        colour = STATUS_COLOURS.get(latest[2], "#222")
        body.append(
            f'<p>Latest reconcile: <a href="{run_href(latest[0])}">{e(latest[0])}</a> at '
            f"{latest[1]:%Y-%m-%d %H:%M:%S}: "
            f'<span class="status" id="latest-status" style="color:{colour}">{e(latest[2].upper())}</span></p>'
        )
    else:
        body.append(f"<p>No reconcile run yet: trigger {e(dag_id('reconcile', o.pipeline))}.</p>")
    body.append(render_findings(o.findings, o.pipeline))
    body.append(
        line_chart("Lag behind Kafka (records)", "records", lag_records)
        + line_chart("Lag behind Kafka (minutes)", "min", lag_minutes)
        + line_chart("Processed up to (offset)", "", processed)
    )
    body.append("<h3>Coverage per partition</h3><table id=\"coverage\"><tr><th>topic</th><th>partition</th>"
                "<th class=num>ledger offsets</th><th class=num>verified offsets</th><th class=num>ranges</th>"
                "<th class=num>verified ranges</th><th class=num>open findings</th>"
                "<th class=num>lost to retention</th></tr>")  # fmt: skip
    for topic, partition, offsets, verified, ranges, verified_ranges, open_here, lost in o.coverage:
        body.append(
            f"<tr><td>{e(topic)}</td><td>{partition}</td><td class=num>{offsets:,}</td>"
            f"<td class=num>{verified:,}</td><td class=num>{ranges:,}</td><td class=num>{verified_ranges:,}</td>"
            f"<td class=num>{open_here:,}</td><td class=num>{lost:,}</td></tr>"
        )
    body.append("</table><h3>Last findings and their repair</h3><table id=\"findings\"><tr><th>run</th><th>when</th>"
                "<th>status</th><th>alert</th><th>repair</th></tr>")  # fmt: skip
    for run_id, at, status, alert, repair_id, repair_status, recheck in o.mismatches:
        repair = (
            f"{e(repair_id)}: {e(repair_status)}"
            + (f' (re-check <a href="{run_href(recheck)}">{e(recheck)}</a>)' if recheck else "")
            if repair_id
            else f'not repaired: <a target="_top" href="{e(repair_href(run_id, o.pipeline))}">repair</a> or '
            f"<code>tidemark repair{e(pipeline_flag(o.pipeline))} --run-id {e(run_id)}</code>"
        )
        body.append(
            f'<tr><td><a href="{run_href(run_id)}">{e(run_id)}</a></td><td>{at:%Y-%m-%d %H:%M}</td>'
            f"<td>{e(status)}</td><td><pre>{e(alert or '')}</pre></td><td>{repair}</td></tr>"
        )
    body.append("</table>")
    body.append(render_ingest_runs(o.ingest_runs))
    body.append(render_quarantine(o.quarantine, o.quarantine_samples or {}, o.quarantine_days))
    body.append("<h3>Reconcile runs</h3><table id=\"runs\"><tr><th>run</th><th>when</th><th>status</th>"
                "<th class=num>ranges checked</th><th class=num>mismatched</th><th>Spark</th>"
                "<th class=num>entities recomputed</th><th class=num>max lag (min)</th>"
                "<th>repair of</th></tr>")  # fmt: skip
    for run_id, at, status, checked, mismatched, used_spark, entities, repair_of, lag in o.runs:
        colour = STATUS_COLOURS.get(status, "#222")
        body.append(
            f'<tr><td><a href="{run_href(run_id)}">{e(run_id)}</a></td><td>{at:%Y-%m-%d %H:%M:%S}</td>'
            f'<td class="status" style="color:{colour}">{e(status)}</td><td class=num>{checked or 0:,}</td>'
            f"<td class=num>{mismatched or 0:,}</td><td>{'yes' if used_spark else 'no'}</td>"
            f"<td class=num>{entities or 0:,}</td><td class=num>{(lag or 0) / 60:,.1f}</td>"
            f"<td>{e(repair_of or '')}</td></tr>"
        )
    body.append("</table>")
    return PAGE.format(title=f"tidemark: {o.pipeline}", body="\n".join(body))


def render_ingest_runs(runs: list) -> str:  # spark_jobs.runs.Run, newest first
    """The runs (ingest, backfill, readmit, repair): what each did and how fast, as charts and a table. A readmit's
    row: the quarantined records it checked again (read), those that came back (accepted), those that stay."""
    e = html.escape
    records: dict[str, list[Point]] = defaultdict(list)
    throughput: dict[str, list[Point]] = defaultdict(list)
    for r in runs:
        for outcome, n in (("accepted", r.accepted), ("duplicates", r.duplicates), ("quarantined", r.quarantined)):
            records[outcome].append(Point(r.finished_at, float(n)))
        throughput[run_kind(r.pipeline)].append(Point(r.finished_at, r.records_per_second))
    rows = [
        '<h3>Runs</h3><table id="ingest-runs"><tr><th>finished</th><th>run</th><th>started by</th>'
        "<th class=num>batches</th><th class=num>read</th><th class=num>accepted</th><th class=num>duplicates</th>"
        "<th class=num>quarantined</th><th class=num>sessions written</th><th class=num>duration (s)</th>"
        "<th class=num>records/s</th><th>outcome</th></tr>"
    ]
    for r in runs:
        outcome = "finished" if r.failure is None else f'<span style="color:#c62828">failed: {e(r.failure)}</span>'
        rows.append(
            f"<tr><td>{r.finished_at:%Y-%m-%d %H:%M:%S}</td><td>{e(run_kind(r.pipeline))}</td>"
            f"<td>{started_by(r.started_by)}</td>"
            f"<td class=num>{r.batches:,}</td><td class=num>{r.records_read:,}</td><td class=num>{r.accepted:,}</td>"
            f"<td class=num>{r.duplicates:,}</td><td class=num>{r.quarantined:,}</td>"
            f"<td class=num>{r.sessions_written:,}</td><td class=num>{r.seconds:,.1f}</td>"
            f"<td class=num>{r.records_per_second:,.0f}</td><td>{outcome}</td></tr>"
        )
    charts = line_chart("Records per run", "records", records) + line_chart("Throughput", "records/s", throughput)
    return charts + "".join(rows) + "</table>"


def started_by(who: str) -> str:
    """Who started a run, as HTML: an Airflow DAG run links to its page in the Airflow UI."""
    from urllib.parse import quote

    parts = who.split(" ", 2)
    if len(parts) == 3 and parts[0] == "airflow":
        _, dag_id, run_id = parts
        href = f"../dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}"
        return f'<a target="_top" href="{html.escape(href)}">{html.escape(dag_id)} {html.escape(run_id)}</a>'
    return html.escape(who)


def render_quarantine(totals: list, samples: dict, days: list[tuple]) -> str:
    """Quarantine by reason: per day as a chart, and per reason its count and latest sample records."""
    e = html.escape
    per_day: dict[str, list[Point]] = defaultdict(list)
    for day, reason, n in days:
        per_day[reason].append(Point(day, float(n)))
    rows = [
        f"<h3>Quarantine</h3>{line_chart(f'Quarantined per day (last {QUARANTINE_DAYS} days)', 'records', per_day)}"
        '<table id="quarantine"><tr><th>reason</th><th class=num>records</th><th>first seen</th><th>last seen</th>'
        "<th>latest records (coordinates, key, value)</th></tr>"
    ]
    for t in totals:
        shown = "<br>".join(e(sample.describe()) for sample in samples.get(t.reason, []))
        rows.append(
            f"<tr><td>{e(t.reason)}</td><td class=num>{t.records:,}</td><td>{t.first_at:%Y-%m-%d %H:%M}</td>"
            f"<td>{t.last_at:%Y-%m-%d %H:%M}</td><td><code>{shown}</code></td></tr>"
        )
    if not totals:
        rows.append('<tr><td colspan="5">no record quarantined</td></tr>')
    return (
        "".join(rows) + "</table><p>Every quarantined record is in the quarantine Delta table; from a shell: "
        "<code>tidemark quarantine [--reason R] [--limit N]</code>. Once the contract accepts them (a fix in "
        "<code>pipelines.yaml</code>), <code>tidemark readmit [--reason R] --dry-run</code> counts what would come "
        "back, and without <code>--dry-run</code> (or the pipeline's readmit DAG) brings it back.</p>"
    )


def repair_href(run_id: str | None, pipeline: str) -> str:
    """The repair page of ``pipeline``'s reconcile run ``run_id``, relative to the tidemark page."""
    return pipeline_href("repair", pipeline, reconcile_run_id=run_id)


def pipeline_flag(pipeline: str) -> str:
    """`` --pipeline NAME`` for a command line of ``pipeline`` (nothing for ``events``)."""
    from spark_jobs.settings import DEFAULT_PIPELINE

    return "" if pipeline == DEFAULT_PIPELINE else f" --pipeline {pipeline}"


def render_findings(findings: list[tuple], pipeline: str) -> str:
    """The open findings (and the latest closed ones): what is still wrong, since when, how it closed."""
    from spark_jobs.reconcile.open_findings import describe

    e = html.escape
    still = [f for f in findings if f[5] is None]
    head = (
        f'<h3>Open findings: <span id="open-findings">{len(still)}</span></h3>'
        + (
            f'<p><a target="_top" href="{e(repair_href(None, pipeline))}">Repair them</a> (a repair re-checks and '
            "closes what it fixed), or acknowledge what no repair can fix: "
            f"<code>tidemark findings{e(pipeline_flag(pipeline))} --acknowledge ID --reason TEXT</code></p>"
            if still
            else ""
        )
        + '<table id="open-findings-table"><tr><th>#</th><th>finding</th><th>opened by</th><th>last seen by</th>'
        "<th>closed</th></tr>"
    )
    rows = []
    for finding_id, finding, opened_by, opened_at, seen_by, closed_by, closed_at, why in findings:
        closed = "open" if closed_by is None else f"{closed_at:%Y-%m-%d %H:%M} by {e(closed_by)}: {e(why or '')}"
        rows.append(
            f"<tr><td>{finding_id}</td><td>{e(describe(finding))}</td>"
            f'<td><a href="{e(pipeline_href(f"runs/{opened_by}", pipeline))}">{e(opened_by)}</a> '
            f"{opened_at:%Y-%m-%d %H:%M}</td>"
            f"<td>{e(seen_by)}</td><td>{closed}</td></tr>"
        )
    return head + "".join(rows) + "</table>"


def render_repair(run_id: str | None, plan_lines: list[str], error: str | None = None, pipeline: str = "events") -> str:
    """The repair page: what a repair of ``pipeline``'s ``run_id`` (None: the latest mismatch) would do,
    and the form that triggers the pipeline's ``tidemark_repair`` for it."""
    e = html.escape
    what = f"reconcile run {e(run_id)}" if run_id else "the latest reconcile run that found a mismatch"
    back = e(pipeline_href("./", pipeline))
    body = [f'<p><a href="{back}">tidemark</a> / {e(pipeline)} / repair</p><h2>Repair {what}</h2>']
    if error:
        body.append(f'<p class="error" id="repair-error" style="color:#c62828">{e(error)}</p>')
    if plan_lines:
        body.append('<pre id="repair-plan">' + e("\n".join(plan_lines)) + "</pre>")
    body.append(
        f'<form method="post" action="{e(pipeline_href("repair", pipeline))}"><label>Reconcile run '
        f'<input name="reconcile_run_id" size="60" value="{e(run_id or "")}" '
        'placeholder="empty: the latest run that found a mismatch"></label> '
        f'<button type="submit" id="trigger-repair">Trigger {e(dag_id("repair", pipeline))}</button></form>'
        "<p>The repair rewrites only what the run named, then re-checks; the re-check closes the findings it "
        f"finds fixed. From a shell: <code>tidemark repair{e(pipeline_flag(pipeline))}"
        + (f" --run-id {e(run_id)}" if run_id else "")
        + "</code></p>"
    )
    return PAGE.format(title="tidemark: repair", body="".join(body))


def render_run(run: tuple | None, ranges: list[tuple], pipeline: str = "events") -> str:
    e = html.escape
    back = e(pipeline_href("../", pipeline))
    if run is None:
        return PAGE.format(
            title="tidemark: no such run", body=f'<p>No such reconcile run. <a href="{back}">Back</a></p>'
        )
    run_id, status, report = run
    rows = "".join(
        f"<tr><td>{e(topic)}</td><td>{partition}</td><td>[{start}, {end})</td><td>{e(pipeline)} {batch}</td>"
        f"<td>{e(reason)}</td><td class=num>{sink:,}</td><td class=num>{'' if kafka is None else f'{kafka:,}'}</td>"
        f"<td>{e(outcome or '')}</td></tr>"
        for topic, partition, start, end, pipeline, batch, reason, sink, kafka, outcome in ranges
    )
    body = (
        f'<p><a href="{back}">tidemark</a> / {e(pipeline)} / {e(run_id)}</p><h2>Reconcile run {e(run_id)}: '
        f'<span class="status" style="color:{STATUS_COLOURS.get(status, "#222")}">{e(status)}</span></h2>'
        f'<pre id="report">{e(report or "")}</pre><h3>Ranges checked</h3><table><tr><th>topic</th>'
        "<th>partition</th><th>offsets</th><th>batch</th><th>why</th><th class=num>sinks</th><th class=num>Kafka</th>"
        "<th>outcome</th></tr>"
        f"{rows}</table>"
    )
    return PAGE.format(title=f"tidemark: {run_id}", body=body)


def create_app():  # -> fastapi.FastAPI
    """The FastAPI app. Every page needs an Airflow user who :func:`may_read` it; the metrics take
    that too, or the static bearer token ``TIDEMARK_METRICS_TOKEN`` (a scraper's)."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.core_api.security import get_user
    from fastapi import APIRouter, Depends, FastAPI, HTTPException
    from fastapi.responses import HTMLResponse, Response

    refused = f"reading tidemark's reports needs the permission to read the {RESOURCE} view"

    # The dependency comes from the default, not from an annotation: see the import of Request.
    def read_permission(user=Depends(get_user)) -> None:  # noqa: B008
        if not may_read(get_auth_manager(), user):
            raise HTTPException(403, refused)

    def fab_permission() -> None:  # first of every route's dependencies, before the user is read
        register_view(get_auth_manager())

    app = FastAPI(title="tidemark", dependencies=[Depends(fab_permission)])
    pages = APIRouter(dependencies=[Depends(read_permission)])

    @app.get("/metrics")
    async def metrics(request: Request, pipeline: str = "") -> Response:
        from airflow.api_fastapi.core_api.security import resolve_user_from_token
        from fastapi.concurrency import run_in_threadpool

        if scraper_token_matches(request.headers.get("authorization", "")):
            allowed = everything
        else:
            user = await resolve_user_from_token(airflow_token(request))  # 401 without a login
            if not may_read(get_auth_manager(), user):
                raise HTTPException(403, refused)
            allowed = pipeline_access(get_auth_manager(), user)
        wanted = pipeline.strip()
        scoped = (lambda name: name == wanted and allowed(name)) if wanted else allowed  # a team's own scrape
        body = await run_in_threadpool(scrape, _settings(""), scoped)  # the database and Kafka off the event loop
        return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")

    @pages.get("/", response_class=HTMLResponse)
    def overview(pipeline: str = "", user=Depends(get_user)) -> str:  # noqa: B008
        try:
            return overview_page(_settings(""), pipeline, pipeline_access(get_auth_manager(), user))
        except LookupError as exc:
            raise HTTPException(404, str(exc)) from None

    @pages.get("/repair", response_class=HTMLResponse)
    def repair_page(reconcile_run_id: str = "", pipeline: str = "", user=Depends(get_user)) -> str:  # noqa: B008
        settings = _settings(pipeline, user)
        run_id = reconcile_run_id.strip() or None
        return render_repair(run_id, *_repair_plan(settings, reconcile_run_id), pipeline=settings.pipeline)

    @pages.post("/repair")
    async def trigger_repair(request: Request, pipeline: str = "", user=Depends(get_user)):  # noqa: B008
        """Trigger the pipeline's ``tidemark_repair`` through Airflow's own REST API, as the signed-in user
        (who needs the permission to trigger it), then open the new run's page in the Airflow UI."""
        from urllib.parse import parse_qs, quote

        from fastapi.responses import RedirectResponse

        settings = _settings(pipeline, user)
        repair_dag = dag_id("repair", settings.pipeline)
        form = parse_qs((await request.body()).decode(), keep_blank_values=True)
        run_id = (form.get("reconcile_run_id") or [""])[0].strip() or None
        status, answer = await _trigger(request, repair_dag, {"reconcile_run_id": run_id})
        if status != 200:
            refused = f"Airflow refused to trigger {repair_dag} ({status}): {answer.get('detail', answer)}"
            error = answer["detail"] if answer.get("paused") else refused
            page = render_repair(run_id, *_repair_plan(settings, run_id or "", error), pipeline=settings.pipeline)
            return HTMLResponse(page, status_code=status)
        return RedirectResponse(f"../dags/{repair_dag}/runs/{quote(answer['dag_run_id'], safe='')}", 303)

    @pages.get("/runs/{run_id:path}", response_class=HTMLResponse)
    def run(run_id: str, pipeline: str = "", user=Depends(get_user)) -> str:  # noqa: B008
        from spark_jobs.reconcile import history

        def read(cur) -> tuple:
            return history.run_report(cur, run_id), history.run_ranges(cur, run_id)

        settings = _settings(pipeline, user)
        return render_run(*read_schema(read, settings), pipeline=settings.pipeline)

    def _settings(pipeline: str, user=None):  # -> Settings
        """The settings of the page's pipeline (``events`` when none is named); 404 for one not declared, or one
        ``user`` may not see (as for one that does not exist: its name is not told)."""
        from spark_jobs.errors import ConfigError
        from spark_jobs.settings import DEFAULT_PIPELINE
        from tidemark_airflow.connections import tidemark_settings

        name = pipeline.strip() or None
        if user is not None and not pipeline_access(get_auth_manager(), user)(name or DEFAULT_PIPELINE):
            raise HTTPException(404, f"no pipeline {name or DEFAULT_PIPELINE!r} to show")
        try:
            return tidemark_settings(name)
        except ConfigError as exc:
            raise HTTPException(404, str(exc)) from None

    app.include_router(pages)
    return app


def overview_page(deployment, pipeline: str, allowed) -> str:  # Settings, the pipeline asked for, Callable
    """The tidemark page of ``pipeline`` (when empty, ``events`` or else the first pipeline the user may see) among
    the pipelines ``allowed`` says; a ``LookupError`` for one it cannot show."""
    from spark_jobs.settings import DEFAULT_PIPELINE
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


def airflow_token(request) -> str | None:  # a starlette Request
    """The Airflow login a request carries: a bearer token, or the UI's session cookie."""
    from airflow.api_fastapi.auth.managers.base_auth_manager import COOKIE_NAME_JWT_TOKEN

    header = request.headers.get("authorization", "")
    if header[:7].lower() == "bearer ":
        return header[7:]
    return request.cookies.get(COOKIE_NAME_JWT_TOKEN)


def scraper_token_matches(authorization: str) -> bool:
    """Whether ``authorization`` is ``Bearer $TIDEMARK_METRICS_TOKEN`` (unset: no scraper token)."""
    import hmac
    import os

    token = os.environ.get("TIDEMARK_METRICS_TOKEN", "")
    return bool(token) and hmac.compare_digest(authorization.encode(), f"Bearer {token}".encode())


def _repair_plan(settings, run_id: str, error: str | None = None) -> tuple[list[str], str | None]:  # Settings
    """The repair plan's lines for the repair page, or why there is nothing to repair."""
    from spark_jobs.errors import TidemarkError
    from spark_jobs.repair import load_plan

    try:
        return load_plan(settings, run_id.strip() or None).lines(), error
    except TidemarkError as exc:
        return [], error or f"cannot repair: {exc}"


async def _trigger(request, dag_id: str, conf: dict) -> tuple[int, dict]:  # a starlette Request
    """POST a run of ``dag_id`` to Airflow's public REST API in this process (the api-server's own
    app, no network), with the caller's credentials: Airflow checks them and the params."""
    import os

    import httpx
    from airflow.api_fastapi.app import cached_app

    token = airflow_token(request)
    airflow = cached_app(apps=os.environ.get("AIRFLOW_API_APPS", "all"))
    headers = {"Authorization": f"Bearer {token}", "Referer": str(request.url)}  # a referer: triggered from the UI
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=airflow), base_url="http://api-server") as client:
        # A paused DAG stays paused (an operator's pause is deliberate), and its run would only wait.
        response = await client.get(f"/api/v2/dags/{dag_id}", headers=headers)
        if response.status_code == 200 and response.json().get("is_paused"):
            paused = f"{dag_id} is paused: unpause it in Airflow (its toggle in the DAG list), then repair again"
            return 409, {"detail": paused, "paused": True}
        if response.status_code == 200:
            response = await client.post(
                f"/api/v2/dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": conf}, headers=headers
            )
    return response.status_code, response.json()
