"""Airflow as users run it, for the UI tests: the four components on a port of their own with a tidemark
database, lake and pipelines file of their own (the shipped ``events`` and a Segment-style ``web``), the
REST API signed in as a user, a real headless Chromium (Debian's, through its chromedriver) signed in
through the login form, and a Prometheus-style scrape of the metrics."""

from __future__ import annotations

import contextlib
import json
import shutil
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

from spark_jobs.db import connect
from spark_jobs.settings import Settings
from tidemark.embedded.airflow import AirflowServices

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


@contextlib.contextmanager
def own_airflow(
    stack: Settings,
    port: int,
    prepare: Callable[[Settings], None] = lambda settings: None,
    lineage: bool = False,
    **services,
) -> Iterator[AirflowServices]:
    """Airflow on ``port`` with a tidemark database, topics and lake of its own (the page shows this module's
    runs only), ``prepare``\\ d before it starts; its metadata database and files are dropped afterwards. With
    ``lineage``, OpenLineage's provider writes every task's events to :func:`lineage_file` (its file transport)."""
    from tidemark.migrations import migrate, migrate_pipelines

    suffix = uuid.uuid4().hex[:8]
    home = stack.home / "runs" / f"airflow-{suffix}"
    admin = connect(stack.postgres_dsn.replace("user=tidemark", "user=postgres"))
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(f'CREATE DATABASE "tidemark_{suffix}" OWNER tidemark')
    dsn = stack.postgres_dsn.replace("dbname=tidemark", f"dbname=tidemark_{suffix}")
    migrate(dsn)
    settings = replace(
        stack,
        lake_root=str(home / "lake"),
        checkpoint_root=str(home / "checkpoints"),
        topic=f"ui-{suffix}",
        postgres_dsn=dsn,
        pipelines_file=two_pipelines(home, f"ui-web-{suffix}"),
    )
    migrate_pipelines(settings)
    prepare(settings)
    if lineage:
        transport = {"type": "file", "log_file_path": str(home / "openlineage.jsonl"), "append": True}
        services["extra_env"] = {"AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(transport)}
    airflow = AirflowServices(settings, port=port, parallelism=2, metadata_database=f"airflow_{suffix}", **services)
    airflow.start()
    try:
        yield airflow
    finally:
        stopped = airflow.stop()
        assert "scheduler" in stopped and not airflow.running()
        with admin.cursor() as cur:
            cur.execute(f'DROP DATABASE "{airflow.metadata_database}" WITH (FORCE)')
            cur.execute(f'DROP DATABASE "tidemark_{suffix}" WITH (FORCE)')
        admin.close()
        shutil.rmtree(airflow.home, ignore_errors=True)


def two_pipelines(home: Path, web_topic: str) -> Path:
    """A pipelines file of the shipped events and the Segment-style web of the pipelines tests."""
    import yaml

    from spark_jobs.settings import PROJECT_ROOT
    from tests.integration.spark_jobs.test_pipelines import WEB

    shipped = yaml.safe_load((PROJECT_ROOT / "pipelines.yaml").read_text())["pipelines"]
    home.mkdir(parents=True, exist_ok=True)
    path = home / "pipelines.yaml"
    path.write_text(yaml.safe_dump({"pipelines": [*shipped, {**WEB, "topic": web_topic}]}))
    return path


class Api:
    """The Airflow REST API, signed in as ``who`` (a token from ``/auth/token``, as a script gets one)."""

    def __init__(self, services: AirflowServices, who: str = "admin") -> None:
        self.base = services.url
        user, password = services.login(who)
        self.token = self._call("POST", "/auth/token", {"username": user, "password": password})["access_token"]

    def _call(self, method: str, path: str, body: dict | None = None) -> dict:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if getattr(self, "token", None):
            headers["Authorization"] = f"Bearer {self.token}"
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, headers=headers, method=method)
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.load(response)

    def get(self, path: str) -> dict:
        return self._call("GET", path)

    def post(self, path: str, body: dict) -> dict:
        return self._call("POST", path, body)

    def patch(self, path: str, body: dict) -> dict:
        return self._call("PATCH", path, body)

    def wait_for_runs(self, dag_id: str, run_type: str, count: int, timeout: float = 600) -> list[dict]:
        """At least ``count`` runs of ``run_type``, once all of them have finished."""
        deadline = time.monotonic() + timeout
        runs: list[dict] = []
        while time.monotonic() < deadline:
            runs = [r for r in self.get(f"/api/v2/dags/{dag_id}/dagRuns")["dag_runs"] if r["run_type"] == run_type]
            if len(runs) >= count and all(r["state"] in ("success", "failed") for r in runs):
                return runs
            time.sleep(3)
        raise AssertionError(f"{dag_id}: {count} finished {run_type} runs expected in {timeout:.0f} s, got {runs}")

    def wait_for_dag(self, dag_id: str, timeout: float = 180) -> dict:
        """The DAG once the dag-processor has parsed it (and, with FAB, created its per-DAG permissions)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.get(f"/api/v2/dags/{dag_id}")
            except urllib.error.HTTPError as exc:
                if exc.code != 404 or time.monotonic() > deadline:
                    raise
            time.sleep(2)


def new_browser():  # -> selenium.webdriver.Chrome
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.implicitly_wait(15)
    return driver


def sign_in(browser, airflow: AirflowServices, who: str = "admin") -> None:
    """Log in through the UI's form, as a user does (anyone signed in before is signed out): the simple auth
    manager's form, or FAB's."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    user, password = airflow.login(who)
    browser.get(airflow.url + "/")
    browser.delete_all_cookies()
    browser.get(airflow.url + "/")
    if airflow.auth_manager == "fab":
        browser.find_element(By.NAME, "username").send_keys(user)
        browser.find_element(By.NAME, "password").send_keys(password)
        browser.find_element(By.XPATH, "//input[@type='submit'] | //button[@type='submit']").click()
    else:
        fields = browser.find_elements(By.TAG_NAME, "input")
        fields[0].send_keys(user)
        fields[1].send_keys(password)
        browser.find_element(By.XPATH, "//button[normalize-space()='Sign in']").click()
    WebDriverWait(browser, 30).until(lambda d: "/login" not in d.current_url)


def scrape(airflow: AirflowServices, who: str = "admin", path: str = "/tidemark/metrics") -> dict:
    """The metrics a Prometheus scrape with ``who``'s token reads now: (name, labels) -> value."""
    from prometheus_client.parser import text_string_to_metric_families

    token = Api(airflow, who).token
    request = urllib.request.Request(airflow.url + path, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def lineage_events(airflow: AirflowServices) -> list[dict]:
    """The OpenLineage events the provider wrote so far (its file transport: one JSON document a line)."""
    transport = json.loads(airflow.extra_env["AIRFLOW__OPENLINEAGE__TRANSPORT"])
    path = Path(transport["log_file_path"])
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
