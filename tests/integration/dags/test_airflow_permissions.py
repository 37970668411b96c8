"""Permissions follow the pipeline, as an Airflow deployment with FAB's auth manager grants them per DAG.

Two teams' users sign in through FAB's login form in a real browser: ``alice``'s role may read the DAGs of
the pipeline ``events`` and trigger its repair, ``bob``'s may read web's DAGs and trigger none. Each sees
on the tidemark page, in its quarantine samples (raw keys and values) and in the metrics only the
pipeline Airflow lets them read; a repair goes through only where Airflow lets them trigger it.
"""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from spark_jobs.pipeline_names import PipelineNames
from spark_jobs.settings import Settings
from tests.integration.dags.airflow_ui import Api, own_airflow, scrape, sign_in
from tests.ports import free_port
from tidemark.embedded.airflow import AirflowServices
from tidemark.producer import ProduceSpec, produce

pytestmark = pytest.mark.airflow

KINDS = ("ingest", "reconcile", "repair", "readmit")  # the DAGs a team reads


@pytest.fixture(scope="module")
def fab(stack: Settings):
    """Airflow with FAB's auth manager; roles ``events_team`` and ``web_team`` granted as an admin grants them
    (``airflow roles add-perms``), users ``alice`` and ``bob`` in them."""
    with own_airflow(stack, free_port(), auth_manager="fab") as airflow:
        admin = Api(airflow)
        for pipeline in ("events", "web"):
            for kind in KINDS:  # parsed, so FAB holds their per-DAG permissions
                admin.wait_for_dag(PipelineNames(pipeline).dag_id(kind))
        # The page's first answer creates FAB's "can read on Tidemark" and gives it to Admin, at once.
        assert _get(airflow, "/tidemark/", admin.token)[0] == 200
        airflow.cli("roles", "create", "events_team", "web_team")
        for role, pipeline in (("events_team", "events"), ("web_team", "web")):
            dags = [f"DAG:{PipelineNames(pipeline).dag_id(kind)}" for kind in KINDS]
            airflow.cli("roles", "add-perms", role, "-r", "Tidemark", *dags, "-a", "can_read")
        # events' team may trigger its repair: edit the DAG, create its runs
        repair = PipelineNames("events").dag_id("repair")
        airflow.cli("roles", "add-perms", "events_team", "-r", f"DAG:{repair}", "-a", "can_edit")
        airflow.cli("roles", "add-perms", "events_team", "-r", f"DAG Run:{repair}", "-a", "can_create")
        airflow.add_user("alice", "events_team")
        airflow.add_user("bob", "web_team")
        yield airflow


def _get(airflow: AirflowServices, path: str, token: str) -> tuple[int, str]:
    request = urllib.request.Request(airflow.url + path, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _quarantined_in_each(settings: Settings, spark) -> dict[str, Settings]:
    """events and web, each with records in its own topic, some malformed, ingested: samples to show."""
    from spark_jobs import ingest

    pipelines = {}
    for name, seed in (("events", 31), ("web", 32)):
        pipeline = settings.for_pipeline(settings.declared(name))
        spec = ProduceSpec(count=40, entities=3, malformed_rate=0.2, seed=seed, contract=pipeline.contract())
        produce(pipeline, spec, topic=pipeline.topic, partitions=1)
        ingest.run_scheduled(spark, pipeline, wait=True)
        pipelines[name] = pipeline
    return pipelines


def test_each_user_sees_on_the_page_only_the_pipeline_whose_dags_airflow_lets_them_read(
    fab: AirflowServices, browser, spark
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    pipelines = _quarantined_in_each(fab.settings, spark)
    for who, own, other in (("alice", "events", "web"), ("bob", "web", "events")):
        sign_in(browser, fab, who)
        browser.get(fab.url + "/tidemark/")  # the nav's link: the user's own pipeline, whichever it is
        heading = WebDriverWait(browser, 30).until(lambda d: d.find_element(By.ID, "pipeline"))
        assert heading.text == f"Pipeline {own}", who
        listed = browser.find_element(By.ID, "pipelines").find_elements(By.TAG_NAME, "tr")[1:]
        assert [row.text.split()[0] for row in listed] == [own], who
        samples = browser.find_element(By.ID, "quarantine").text
        assert f"{pipelines[own].topic} p0 offset" in samples, (who, samples)  # its raw records
        assert pipelines[other].topic not in browser.page_source, who  # nothing of the other team's
        # The other pipeline's page, asked for by name, is not there for this user.
        browser.get(fab.url + f"/tidemark/?pipeline={other}")
        assert f"no pipeline '{other}' to show" in browser.page_source, who
        assert pipelines[other].topic not in browser.page_source, who


def test_each_users_scrape_reads_only_their_pipelines_series(fab: AirflowServices) -> None:
    def pipelines_in(samples: dict) -> set[str]:
        return {dict(labels)["pipeline"] for _, labels in samples if "pipeline" in dict(labels)}

    assert pipelines_in(scrape(fab)) == {"events", "web"}  # Admin reads every DAG
    assert pipelines_in(scrape(fab, "alice")) == {"events"}
    assert pipelines_in(scrape(fab, "bob")) == {"web"}
    assert pipelines_in(scrape(fab, "bob", "/tidemark/metrics?pipeline=events")) == set()  # scoped, not widened
    assert pipelines_in(scrape(fab, "alice", "/tidemark/metrics?pipeline=events")) == {"events"}


def test_a_repair_goes_through_only_where_airflow_lets_the_user_trigger_it(fab: AirflowServices, browser) -> None:
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    admin = Api(fab)
    for pipeline in ("events", "web"):  # unpaused, so a refusal is Airflow's permission, not the pause
        admin.patch(f"/api/v2/dags/{PipelineNames(pipeline).dag_id('repair')}", {"is_paused": False})
    try:
        sign_in(browser, fab, "bob")  # reads web's DAGs, may trigger none
        browser.get(fab.url + "/tidemark/repair?pipeline=web")
        browser.find_element(By.ID, "trigger-repair").click()
        # The text is read inside the wait: the page that says it may be replaced while it is read (a
        # reference to the element of a page the browser left is stale).
        error = WebDriverWait(browser, 30, ignored_exceptions=(NoSuchElementException, StaleElementReferenceException))
        text = error.until(lambda d: d.find_element(By.ID, "repair-error").text)
        assert text.startswith("Airflow refused to trigger tidemark_repair__web (403)"), text
        assert admin.get("/api/v2/dags/tidemark_repair__web/dagRuns")["total_entries"] == 0

        sign_in(browser, fab, "alice")  # may trigger events' repair
        browser.get(fab.url + "/tidemark/repair")
        browser.find_element(By.ID, "trigger-repair").click()
        WebDriverWait(browser, 30).until(lambda d: "/dags/tidemark_repair/runs/" in d.current_url)
        [run] = admin.get("/api/v2/dags/tidemark_repair/dagRuns")["dag_runs"]
        assert run["run_type"] == "manual" and run["triggering_user_name"] == "alice", run
    finally:
        for pipeline in ("events", "web"):
            admin.patch(f"/api/v2/dags/{PipelineNames(pipeline).dag_id('repair')}", {"is_paused": True})
