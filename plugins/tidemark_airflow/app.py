"""The tidemark page's FastAPI app, which ``plugins/tidemark_plugin.py`` mounts on Airflow's api-server at
``/tidemark``: its routes, who may ask them (:mod:`tidemark_airflow.access`), and the repair button's
trigger through Airflow's own REST API. What the pages show is :mod:`tidemark_airflow.view`'s.

Every page needs an Airflow user who may read the custom view ``Tidemark`` (the UI's session cookie or a
bearer token); the metrics take that too, or the static bearer token ``TIDEMARK_METRICS_TOKEN`` (a
scraper's). Within them a user sees the pipelines whose DAGs Airflow lets them read.
"""

from __future__ import annotations

from airflow.api_fastapi.core_api.security import get_user

# FastAPI reads a route's annotations from this module's globals (they are strings here); a dependency
# comes from a parameter's default, not from an annotation.
from fastapi import Depends, Request

from tidemark_airflow.access import RESOURCE, everything, may_read, pipeline_access, register_view
from tidemark_airflow.metrics import scrape
from tidemark_airflow.pipelines_list import read_schema
from tidemark_airflow.view import overview_page, render_repair, render_run

REFUSED = f"reading tidemark's reports needs the permission to read the {RESOURCE} view"


def create_app():  # -> fastapi.FastAPI
    """The app: the metrics, and the pages behind the permission to read them."""
    from airflow.api_fastapi.app import get_auth_manager
    from fastapi import APIRouter, FastAPI, HTTPException
    from fastapi.responses import HTMLResponse

    def fab_permission() -> None:  # first of every route's dependencies, before the user is read
        register_view(get_auth_manager())

    def read_permission(user=Depends(get_user)) -> None:  # noqa: B008
        if not may_read(get_auth_manager(), user):
            raise HTTPException(403, REFUSED)

    app = FastAPI(title="tidemark", dependencies=[Depends(fab_permission)])
    app.add_api_route("/metrics", metrics, methods=["GET"])
    pages = APIRouter(dependencies=[Depends(read_permission)])
    pages.add_api_route("/", overview, methods=["GET"], response_class=HTMLResponse)
    pages.add_api_route("/repair", repair_page, methods=["GET"], response_class=HTMLResponse)
    pages.add_api_route("/repair", trigger_repair, methods=["POST"])
    pages.add_api_route("/runs/{run_id:path}", run, methods=["GET"], response_class=HTMLResponse)
    app.include_router(pages)
    return app


async def metrics(request: Request, pipeline: str = ""):  # -> fastapi.Response
    """Prometheus' text format: the pipelines the login may read (the scraper's token: every one), or the one
    ``pipeline`` names among them (a team's own scrape)."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.core_api.security import resolve_user_from_token
    from fastapi import HTTPException, Response
    from fastapi.concurrency import run_in_threadpool

    if scraper_token_matches(request.headers.get("authorization", "")):
        allowed = everything
    else:
        user = await resolve_user_from_token(airflow_token(request))  # 401 without a login
        if not may_read(get_auth_manager(), user):
            raise HTTPException(403, REFUSED)
        allowed = pipeline_access(get_auth_manager(), user)
    wanted = pipeline.strip()
    scoped = (lambda name: name == wanted and allowed(name)) if wanted else allowed
    body = await run_in_threadpool(scrape, pipeline_settings(""), scoped)  # the database and Kafka off the loop
    return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")


def overview(pipeline: str = "", user=Depends(get_user)) -> str:  # noqa: B008
    from airflow.api_fastapi.app import get_auth_manager
    from fastapi import HTTPException

    try:
        return overview_page(pipeline_settings(""), pipeline, pipeline_access(get_auth_manager(), user))
    except LookupError as exc:
        raise HTTPException(404, str(exc)) from None


def repair_page(reconcile_run_id: str = "", pipeline: str = "", user=Depends(get_user)) -> str:  # noqa: B008
    settings = pipeline_settings(pipeline, user)
    run_id = reconcile_run_id.strip() or None
    return render_repair(run_id, *_repair_plan(settings, reconcile_run_id), pipeline=settings.pipeline)


async def trigger_repair(request: Request, pipeline: str = "", user=Depends(get_user)):  # noqa: B008
    """Trigger the pipeline's ``tidemark_repair`` through Airflow's own REST API, as the signed-in user (who
    needs the permission to trigger it), then open the new run's page in the Airflow UI."""
    from urllib.parse import parse_qs, quote

    from fastapi.responses import HTMLResponse, RedirectResponse

    settings = pipeline_settings(pipeline, user)
    repair_dag = settings.names.dag_id("repair")
    form = parse_qs((await request.body()).decode(), keep_blank_values=True)
    run_id = (form.get("reconcile_run_id") or [""])[0].strip() or None
    status, answer = await _trigger(request, repair_dag, {"reconcile_run_id": run_id})
    if status != 200:
        refused = f"Airflow refused to trigger {repair_dag} ({status}): {answer.get('detail', answer)}"
        error = answer["detail"] if answer.get("paused") else refused
        page = render_repair(run_id, *_repair_plan(settings, run_id or "", error), pipeline=settings.pipeline)
        return HTMLResponse(page, status_code=status)
    return RedirectResponse(f"../dags/{repair_dag}/runs/{quote(answer['dag_run_id'], safe='')}", 303)


def run(run_id: str, pipeline: str = "", user=Depends(get_user)) -> str:  # noqa: B008
    from spark_jobs.store import history

    def read(cur) -> tuple[tuple[str, str, str] | None, list[tuple]]:
        return history.run_report(cur, run_id), history.run_ranges(cur, run_id)

    settings = pipeline_settings(pipeline, user)
    report, ranges = read_schema(read, settings)
    return render_run(report, ranges, pipeline=settings.pipeline)


def pipeline_settings(pipeline: str, user=None):  # -> Settings
    """The settings of the page's pipeline (``events`` when none is named); 404 for one not declared, or one
    ``user`` may not see (as for one that does not exist: its name is not told)."""
    from airflow.api_fastapi.app import get_auth_manager
    from fastapi import HTTPException

    from spark_jobs.errors import ConfigError
    from spark_jobs.pipeline_names import DEFAULT_PIPELINE
    from tidemark_airflow.connections import tidemark_settings

    name = pipeline.strip() or None
    if user is not None and not pipeline_access(get_auth_manager(), user)(name or DEFAULT_PIPELINE):
        raise HTTPException(404, f"no pipeline {name or DEFAULT_PIPELINE!r} to show")
    try:
        return tidemark_settings(name)
    except ConfigError as exc:
        raise HTTPException(404, str(exc)) from None


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
