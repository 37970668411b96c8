"""Airflow as users run it (`tidemark airflow`): the UI's trigger form and Airflow's own Backfill.

The Airflow components run on their own port with the tests' services; a real headless Chromium
(Debian's, through its chromedriver) logs in, fills ``tidemark_backfill``'s trigger form and
watches the run succeed. Airflow's Backfill of ``tidemark_ingest`` goes through the REST API.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import UTC, datetime, timedelta

import pytest

from spark_jobs.offsets import ensure_topic, latest_ranges
from spark_jobs.settings import Settings
from tests.integration.dags.airflow_ui import Api, lineage_events, own_airflow, scrape, sign_in
from tests.integration.spark_jobs.checks import query
from tests.ports import free_port
from tidemark.embedded.airflow import AirflowServices
from tidemark.producer import ProduceSpec, produce

# Airflow itself (dag.test, the api-server and a browser): `make test-airflow`, not `make test`.
pytestmark = pytest.mark.airflow


@pytest.fixture(scope="module")
def airflow(stack: Settings):
    """The four Airflow components for this module, with a topic and lake of its own."""

    def prepare(settings: Settings) -> None:
        # CreateTime, so records can arrive in yesterday's intervals for the Backfill test. They are
        # written first: Kafka finds offsets for times by the first record at or after a time, so
        # timestamps must grow with offsets (as they do with LogAppendTime) for time ranges to make sense.
        ensure_topic(settings, settings.topic, partitions=2, timestamp_type="CreateTime")
        _produce_yesterday(settings)
        [YESTERDAYS_PARTITION[settings.topic]] = [r.partition for r in latest_ranges(settings, settings.topic) if r.end]

    # A viewer may read DAGs, not trigger them. OpenLineage's provider writes every task's events to a file.
    with own_airflow(stack, free_port(), prepare, lineage=True, users="admin:admin,viewer:viewer") as services:
        yield services


YESTERDAY = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(days=1)
ARRIVALS = [YESTERDAY + timedelta(minutes=m) for m in (1, 5, 16, 20, 40)]
YESTERDAYS_PARTITION: dict[str, int] = {}  # topic -> the one partition yesterday's records (one key) are in


def _produce_yesterday(settings: Settings) -> None:
    from confluent_kafka import Producer

    producer = Producer(settings.kafka_client_config())
    for i, when in enumerate(ARRIVALS):
        event = {"event_id": f"bf-{i}", "entity_id": "bf-user", "event_type": "view", "event_time": when.isoformat()}
        millis = int(when.timestamp() * 1000)
        producer.produce(settings.topic, key=b"bf-user", value=json.dumps(event).encode(), timestamp=millis)
    assert producer.flush(30) == 0


def test_a_backfill_triggered_from_the_ui_form_succeeds(airflow: AirflowServices, browser) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    settings = airflow.settings
    before = {r.partition: r.end for r in latest_ranges(settings, settings.topic)}
    produce(settings, ProduceSpec(count=200, entities=6, seed=11, id_prefix="ui-"), topic=settings.topic, partitions=2)
    # One partition of the two: a backfill of a subset of partitions, as a reconcile alert asks for.
    [new] = [r for r in latest_ranges(settings, settings.topic) if r.partition == 1]
    offsets = f"1:{before[1]}-{new.end}"
    assert new.end > before[1]

    sign_in(browser, airflow)

    browser.get(airflow.url + "/dags/tidemark_backfill")
    browser.find_element(By.XPATH, "//button[@aria-label='Trigger Dag']").click()
    topic = browser.find_element(By.NAME, "element_topic")
    topic.send_keys(Keys.CONTROL, "a")
    topic.send_keys(Keys.DELETE)
    topic.send_keys(settings.topic)
    browser.find_element(By.NAME, "element_offsets").send_keys(offsets)
    assert not browser.find_element(By.NAME, "element_dry_run").is_selected()
    trigger = browser.find_elements(By.XPATH, "//*[@role='dialog']//button[normalize-space()='Trigger']")[-1]
    WebDriverWait(browser, 30).until(expected_conditions.element_to_be_clickable(trigger)).click()

    # The UI opens the new run; the state badge in its header card must reach Success.
    WebDriverWait(browser, 30).until(lambda d: "/runs/" in d.current_url)
    run_url = browser.current_url
    run_id = urllib.parse.unquote(run_url.rstrip("/").split("/runs/")[1].split("/")[0])
    badge = "//*[@data-testid='header-card']//*[@data-testid='state-badge']"
    deadline, state = time.monotonic() + 600, ""
    while time.monotonic() < deadline:
        browser.get(run_url)
        state = browser.find_element(By.XPATH, badge).text.strip().lower()
        if state in ("success", "failed"):
            break
        time.sleep(5)
    assert state == "success", f"the run at {run_url} ended {state!r}"

    api = Api(airflow)
    run = api.get(f"/api/v2/dags/tidemark_backfill/dagRuns/{urllib.parse.quote(run_id)}")
    assert run["state"] == "success" and run["conf"]["offsets"] == offsets
    planned = query(
        settings,
        "SELECT kafka_partition, start_offset, end_offset FROM ledger_ranges WHERE pipeline = %s",
        f"backfill:{settings.topic}",
    )
    assert planned == [(1, before[1], new.end)]


def test_a_backfill_run_tells_openlineage_its_topic_offsets_and_the_tables_it_wrote(airflow: AirflowServices) -> None:
    """Airflow's OpenLineage provider, configured with its file transport, gets from the backfill task the
    topic and the offset ranges its batch processed, and the Delta and PostgreSQL tables it wrote with their
    rows, as the ledger records them."""
    settings = airflow.settings
    before = {r.partition: r.end for r in latest_ranges(settings, settings.topic)}
    spec = ProduceSpec(count=40, entities=3, duplicate_rate=0.2, seed=12, id_prefix="ol-")
    produce(settings, spec, topic=settings.topic, partitions=2)
    [new] = [r for r in latest_ranges(settings, settings.topic) if r.partition == 0]
    offsets = f"0:{before[0]}-{new.end}"
    api = Api(airflow)
    api.patch("/api/v2/dags/tidemark_backfill", {"is_paused": False})
    try:
        conf = {"topic": settings.topic, "offsets": offsets}
        run_id = api.post("/api/v2/dags/tidemark_backfill/dagRuns", {"logical_date": None, "conf": conf})["dag_run_id"]
        [run] = [r for r in api.wait_for_runs("tidemark_backfill", "manual", 1) if r["dag_run_id"] == run_id]
    finally:
        api.patch("/api/v2/dags/tidemark_backfill", {"is_paused": True})
    assert run["state"] == "success", run
    [(accepted, duplicates, quarantined)] = query(
        settings,
        """SELECT b.accepted, b.duplicates, b.quarantined FROM ledger_batches AS b
           JOIN ledger_ranges AS r USING (pipeline, batch_id)
           WHERE b.pipeline = %s AND r.kafka_partition = 0 AND r.start_offset = %s""",
        f"backfill:{settings.topic}",
        before[0],
    )
    events = [
        e for e in lineage_events(airflow)
        if e["job"]["name"] == "tidemark_backfill.backfill" and e["eventType"] == "COMPLETE"
        and e["run"]["facets"].get("airflow", {}).get("dagRun", {}).get("run_id") == run_id
    ]  # fmt: skip
    assert len(events) == 1, [e["job"]["name"] for e in lineage_events(airflow)]
    [topic] = events[0]["inputs"]
    assert (topic["namespace"], topic["name"]) == (f"kafka://{settings.bootstrap_servers}", settings.topic)
    assert topic["inputFacets"]["tidemark_offsetRanges"]["ranges"] == [
        {"partition": 0, "start": before[0], "end": new.end}
    ]
    outputs = events[0]["outputs"]
    delta = {o["name"].rsplit("/", 1)[-1]: o for o in outputs if o["namespace"] == "file"}
    rows = {t: o["outputFacets"].get("outputStatistics", {}).get("rowCount") for t, o in delta.items()}
    assert rows == {"events": accepted, "duplicates": duplicates, "quarantine": quarantined, "sessions": None}
    assert accepted + duplicates + quarantined == new.end - before[0]  # every offset of the range, once
    assert delta["events"]["name"] == settings.table_path("events")
    [postgres] = [o for o in outputs if o["namespace"].startswith("postgres://")]
    assert postgres["name"].endswith(".public.sessions"), postgres["name"]
    fields = [f["name"] for f in delta["events"]["facets"]["schema"]["fields"]]
    assert fields[:3] == ["topic", "partition", "offset"], fields


def test_airflows_own_backfill_of_the_ingest_dag_rereads_each_interval(airflow: AirflowServices) -> None:
    settings = airflow.settings
    start = YESTERDAY
    api = Api(airflow)
    pipeline = f"backfill:{settings.topic}"
    partition = YESTERDAYS_PARTITION[settings.topic]
    latest = "SELECT coalesce(max(batch_id), -1) FROM ledger_batches WHERE pipeline = %s"
    [(before,)] = query(settings, latest, pipeline)
    # Backfill runs only run while the DAG is unpaused; its scheduled run then ingests the topic in
    # the ingest:<topic> pipeline, which is kept apart from the backfill's batches below.
    api.patch("/api/v2/dags/tidemark_ingest", {"is_paused": False})
    backfill = api.post(
        "/api/v2/backfills",
        {
            "dag_id": "tidemark_ingest",
            "from_date": start.isoformat(),
            "to_date": (start + timedelta(minutes=15)).isoformat(),
            "max_active_runs": 1,
            "reprocess_behavior": "completed",
            "dag_run_conf": {"partitions": str(partition)},  # only the partition that holds them
        },
    )
    assert backfill["dag_id"] == "tidemark_ingest"
    runs = api.wait_for_runs("tidemark_ingest", "backfill", 2)
    assert len(runs) >= 2 and all(r["state"] == "success" for r in runs), runs
    api.patch("/api/v2/dags/tidemark_ingest", {"is_paused": True})

    # Each run read its own data interval by arrival time: exactly the records inside them.
    intervals = [(datetime.fromisoformat(r["data_interval_start"]), datetime.fromisoformat(r["data_interval_end"]))
                 for r in runs]  # fmt: skip
    inside = sum(any(lo <= when < hi for lo, hi in intervals) for when in ARRIVALS)
    assert 0 < inside < len(ARRIVALS)
    [(batches, read)] = query(
        settings,
        "SELECT count(*), sum(records_read) FROM ledger_batches WHERE pipeline = %s AND batch_id > %s",
        pipeline,
        before,
    )
    assert (batches, read) == (len(runs), inside)
    read_partitions = query(
        settings, "SELECT DISTINCT kafka_partition FROM ledger_ranges WHERE pipeline = %s AND batch_id > %s",
        pipeline, before,
    )  # fmt: skip
    assert read_partitions == [(partition,)], "the other partition is not read"


def test_the_tidemark_page_in_the_airflow_ui_shows_real_reconcile_numbers_and_charts(
    airflow: AirflowServices, browser, spark
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from spark_jobs import ingest, reconcile

    settings = airflow.settings
    produce(settings, ProduceSpec(count=150, entities=6, seed=13, id_prefix="view-"), topic=settings.topic)
    ingest.run_scheduled(spark, settings, wait=True)
    first = reconcile.run(settings, "ui-first", lambda: spark)
    second = reconcile.run(settings, "ui-second", spark_factory=None)  # nothing new: no Spark
    assert first is not None and second is not None and not second.used_spark
    offsets: dict[tuple[str, int], set[int]] = {}  # each offset once: the module's backfills read some again
    for topic, partition, start, end in query(
        settings, "SELECT topic, kafka_partition, start_offset, end_offset FROM verified_ranges"
    ):
        offsets.setdefault((topic, partition), set()).update(range(start, end))
    verified = [(topic, partition, len(held)) for (topic, partition), held in sorted(offsets.items())]
    assert verified and all(n > 0 for *_, n in verified)

    sign_in(browser, airflow)

    # The nav entry opens the page inside the UI (an iframe of /tidemark/).
    browser.get(airflow.url + "/plugin/tidemark")
    frame = WebDriverWait(browser, 30).until(lambda d: d.find_element(By.TAG_NAME, "iframe"))
    assert frame.get_attribute("src").rstrip("/").endswith("/tidemark")
    browser.switch_to.frame(frame)
    status = WebDriverWait(browser, 30).until(lambda d: d.find_element(By.ID, "latest-status"))
    assert status.text == second.status.upper()
    page = browser.page_source
    assert "ui-first" in page and "ui-second" in page
    coverage = browser.find_element(By.ID, "coverage").text
    for topic, partition, count in verified:  # every offset processed is verified: the same number twice
        assert f"{topic} {partition} {count:,} {count:,}" in coverage, coverage
    lines = browser.find_elements(By.CSS_SELECTOR, "svg polyline")
    assert lines and all(line.size["width"] > 0 for line in lines), "the charts draw a line per partition"
    browser.find_element(By.LINK_TEXT, "ui-first").click()
    report = WebDriverWait(browser, 30).until(lambda d: d.find_element(By.ID, "report"))
    assert report.text.startswith("tidemark reconcile ui-first:")
    browser.switch_to.default_content()

    # Without a login the page is refused.
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(airflow.url + "/tidemark/", timeout=30)
    assert refused.value.code in (401, 403)


def test_the_page_lists_every_pipeline_and_each_pipelines_link_opens_its_own_page(
    airflow: AirflowServices, browser, spark
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from spark_jobs import ingest, reconcile

    events = airflow.settings
    web = events.for_pipeline(events.declared("web"))
    spec = ProduceSpec(count=80, entities=4, malformed_rate=0.1, seed=21, contract=web.contract())
    produce(web, spec, topic=web.topic, partitions=2)
    ingest.run_scheduled(spark, web, wait=True)
    checked = reconcile.run(web, "ui-web", lambda: spark)
    assert checked is not None and checked.status == "ok"
    # Airflow parsed web's own DAGs from the pipelines file, and no import error.
    api = Api(airflow)
    assert {api.get(f"/api/v2/dags/{kind}__web")["dag_id"] for kind in ("tidemark_ingest", "tidemark_reconcile")} == {
        "tidemark_ingest__web",
        "tidemark_reconcile__web",
    }
    assert api.get("/api/v2/importErrors")["total_entries"] == 0

    sign_in(browser, airflow)
    browser.get(airflow.url + "/plugin/tidemark")
    frame = WebDriverWait(browser, 30).until(lambda d: d.find_element(By.TAG_NAME, "iframe"))
    browser.switch_to.frame(frame)
    listed = WebDriverWait(browser, 30).until(lambda d: d.find_element(By.ID, "pipelines"))
    rows = {row.text.split()[0]: row.text for row in listed.find_elements(By.TAG_NAME, "tr")[1:]}
    assert set(rows) == {"events", "web"}, rows
    [(ledger,)] = query(web, "SELECT count(DISTINCT (kafka_partition, start_offset)) FROM ledger_ranges")
    assert ledger and rows["web"].startswith(f"web {web.topic} OK 0 "), rows["web"]
    [(offsets,)] = query(web, "SELECT sum(end_offset - start_offset) FROM verified_ranges")
    assert rows["web"].endswith(f"{offsets:,} / {offsets:,}"), rows["web"]  # every offset read is verified

    # Web's link opens web's page: its verdict, its run, whose link opens web's report.
    browser.find_element(By.LINK_TEXT, "web").click()
    heading = WebDriverWait(browser, 30).until(lambda d: d.find_element(By.ID, "pipeline"))
    assert heading.text == "Pipeline web" and "pipeline=web" in browser.current_url
    assert browser.find_element(By.ID, "latest-status").text == "OK"
    assert "ui-first" not in browser.page_source  # events' runs are on events' page
    browser.find_element(By.LINK_TEXT, "ui-web").click()
    report = WebDriverWait(browser, 30).until(lambda d: d.find_element(By.ID, "report"))
    assert report.text.startswith("tidemark reconcile ui-web:")
    browser.find_element(By.LINK_TEXT, "tidemark").click()
    heading = WebDriverWait(browser, 30).until(lambda d: d.find_element(By.ID, "pipeline"))
    assert heading.text == "Pipeline web"
    browser.switch_to.default_content()


def test_the_alerts_repair_link_opens_a_form_with_the_run_filled_in_whose_button_repairs(
    airflow: AirflowServices, browser, spark, monkeypatch
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from spark_jobs import ingest, reconcile
    from tidemark_airflow.operators import repair_form_url

    settings = airflow.settings
    produce(settings, ProduceSpec(count=120, entities=5, seed=17, id_prefix="link-"), topic=settings.topic)
    ingest.run_scheduled(spark, settings, wait=True)
    gone = query(
        settings,
        "DELETE FROM sessions WHERE session_id IN (SELECT session_id FROM sessions ORDER BY 1 LIMIT 2) "
        "RETURNING session_id",
    )
    found = reconcile.run(settings, "link-found", lambda: spark)
    assert found is not None
    assert found.status == "mismatch", found.summary()
    # The link the verdict's alert carries, under the api-server's base URL.
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", airflow.url)
    link = repair_form_url("link-found")

    sign_in(browser, airflow)
    browser.get(link)
    field = WebDriverWait(browser, 30).until(lambda d: d.find_element(By.NAME, "reconcile_run_id"))
    assert field.get_attribute("value") == "link-found"
    plan = browser.find_element(By.ID, "repair-plan").text
    assert plan.startswith("repair of reconcile run link-found:") and "recompute the sessions of" in plan, plan
    # The repair DAG is paused (Airflow loads DAGs paused; an operator may pause it on purpose): the
    # button does not unpause it, it says so and how to run the repair, and no run waits behind the pause.
    api = Api(airflow)
    assert api.get("/api/v2/dags/tidemark_repair")["is_paused"]
    browser.find_element(By.ID, "trigger-repair").click()
    refused = WebDriverWait(browser, 30).until(lambda d: d.find_element(By.ID, "repair-error")).text
    assert "tidemark_repair is paused" in refused and "unpause it" in refused, refused
    assert api.get("/api/v2/dags/tidemark_repair")["is_paused"], "the button unpaused the repair DAG"
    assert api.get("/api/v2/dags/tidemark_repair/dagRuns")["total_entries"] == 0
    api.patch("/api/v2/dags/tidemark_repair", {"is_paused": False})  # the operator's decision
    # A user who may read the DAGs but not trigger them sees the form, and the button is refused by Airflow.
    sign_in(browser, airflow, "viewer")
    browser.get(link)
    WebDriverWait(browser, 30).until(lambda d: d.find_element(By.ID, "trigger-repair")).click()
    refused = WebDriverWait(browser, 30).until(lambda d: d.find_element(By.ID, "repair-error")).text
    assert "Airflow refused to trigger tidemark_repair (403)" in refused, refused
    assert api.get("/api/v2/dags/tidemark_repair/dagRuns")["total_entries"] == 0
    sign_in(browser, airflow)
    browser.get(link)
    WebDriverWait(browser, 30).until(lambda d: d.find_element(By.ID, "trigger-repair")).click()

    # Airflow's page of the new run opens; its state badge must reach Success.
    WebDriverWait(browser, 30).until(lambda d: "/dags/tidemark_repair/runs/" in d.current_url)
    run_url = browser.current_url
    badge = "//*[@data-testid='header-card']//*[@data-testid='state-badge']"
    deadline, state = time.monotonic() + 600, ""
    while time.monotonic() < deadline:
        browser.get(run_url)
        state = WebDriverWait(browser, 30).until(lambda d: d.find_element(By.XPATH, badge)).text.strip().lower()
        if state in ("success", "failed"):
            break
        time.sleep(5)
    assert state == "success", f"the repair run at {run_url} ended {state!r}"
    [(status, recheck)] = query(settings, "SELECT status, recheck_run FROM repairs WHERE reconcile_run = 'link-found'")
    assert status == "ok" and recheck
    assert len(query(settings, "SELECT 1 FROM sessions WHERE session_id = ANY(%s)", [s for (s,) in gone])) == 2
    assert query(settings, "SELECT count(*) FROM findings WHERE closed_at IS NULL") == [(0,)]

    api.patch("/api/v2/dags/tidemark_repair", {"is_paused": True})
    # The page's own link goes to the same form; with no run given it names the latest mismatch.
    browser.get(airflow.url + "/tidemark/repair")
    assert "the latest reconcile run that found a mismatch" in browser.find_element(By.TAG_NAME, "h2").text
    assert browser.find_element(By.NAME, "reconcile_run_id").get_attribute("value") == ""


def test_the_page_shows_each_ingest_run_and_the_quarantine_by_reason_whose_run_link_opens_the_airflow_run(
    airflow: AirflowServices, browser
) -> None:
    from confluent_kafka import Producer
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    settings = airflow.settings
    producer = Producer(settings.kafka_client_config())
    for value in (b"{not json", b"{still not json"):
        producer.produce(settings.topic, key=b"page-user", value=value)
    assert producer.flush(30) == 0
    produce(settings, ProduceSpec(count=30, entities=3, seed=19, id_prefix="page-"), topic=settings.topic)

    # A run of tidemark_ingest triggered in Airflow (the DAG runs only while unpaused).
    api = Api(airflow)
    api.patch("/api/v2/dags/tidemark_ingest", {"is_paused": False})
    triggered = api.post("/api/v2/dags/tidemark_ingest/dagRuns", {"logical_date": None})
    [done] = [
        r for r in api.wait_for_runs("tidemark_ingest", "manual", 1) if r["dag_run_id"] == triggered["dag_run_id"]
    ]
    api.patch("/api/v2/dags/tidemark_ingest", {"is_paused": True})
    assert done["state"] == "success", done
    run_id = done["dag_run_id"]
    [(batches, read, accepted, duplicates, quarantined)] = query(
        settings,
        "SELECT batches, records_read, accepted, duplicates, quarantined FROM ingest_runs WHERE started_by = %s",
        f"airflow tidemark_ingest {run_id}",
    )
    [(invalid_json,)] = query(settings, "SELECT sum(records) FROM quarantine_reasons WHERE reason = 'invalid_json'")
    assert invalid_json >= 2, "the two values that are not JSON were quarantined (by this run or a scheduled one)"

    sign_in(browser, airflow)
    browser.get(airflow.url + "/tidemark/")
    link = WebDriverWait(browser, 30).until(lambda d: d.find_element(By.LINK_TEXT, f"tidemark_ingest {run_id}"))
    row = link.find_element(By.XPATH, "./ancestor::tr").text
    # The run's kind (the page is the pipeline's), not the ledger's ingest:<topic>.
    assert f" ingest tidemark_ingest {run_id} {batches} {read:,} {accepted:,} {duplicates:,} " \
        f"{quarantined:,} " in row and f"ingest:{settings.topic}" not in row, row  # fmt: skip
    reasons = browser.find_element(By.ID, "quarantine").text
    assert f"invalid_json {invalid_json:,} " in reasons and 'key "page-user", value "{not json"' in reasons, reasons
    chart = 'svg[data-chart="Records per run"]'
    assert browser.find_elements(By.CSS_SELECTOR, f"{chart} polyline, {chart} circle.sample")  # a line, or a dot

    # The run's link opens its page in the Airflow UI (not a 404): the header card shows its state.
    link.click()
    WebDriverWait(browser, 30).until(lambda d: "/dags/tidemark_ingest/runs/" in d.current_url)
    badge = "//*[@data-testid='header-card']//*[@data-testid='state-badge']"
    state = WebDriverWait(browser, 30).until(lambda d: d.find_element(By.XPATH, badge)).text.strip().lower()
    assert state == "success" and urllib.parse.unquote(browser.current_url).rstrip("/").endswith(run_id)


def test_runs_of_two_pipelines_run_at_once_through_airflow_each_under_its_own_writer_lock(
    airflow: AirflowServices, spark
) -> None:
    """Both pipelines' ingest DAGs triggered together: the scheduler runs the two spark-submits side by
    side (each holds its own pipeline's writer lock), and each run ends with its pipeline exact."""
    from spark_jobs import reconcile
    from tests.integration.spark_jobs.checks import assert_offset_coverage, assert_settings_sinks_agree

    events = airflow.settings
    web = events.for_pipeline(events.declared("web"))
    produce(events, ProduceSpec(count=300, entities=6, seed=23, id_prefix="both-"), topic=events.topic)
    spec = ProduceSpec(count=300, entities=6, malformed_rate=0.05, seed=24, id_prefix="both-", contract=web.contract())
    produce(web, spec, topic=web.topic)
    api = Api(airflow)
    since = datetime.now(UTC)
    triggered = {}
    for dag_id in ("tidemark_ingest", "tidemark_ingest__web"):
        api.patch(f"/api/v2/dags/{dag_id}", {"is_paused": False})
        triggered[dag_id] = api.post(f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None})["dag_run_id"]
    for dag_id, run_id in triggered.items():
        [done] = [r for r in api.wait_for_runs(dag_id, "manual", 1) if r["dag_run_id"] == run_id]
        assert done["state"] == "success", done
        api.wait_for_runs(dag_id, "scheduled", 0)  # unpausing may have added a scheduled run: it finishes too
        api.patch(f"/api/v2/dags/{dag_id}", {"is_paused": True})
    # The runs (the manual ones, and any scheduled one) of the two pipelines ran at the same time.
    spans = [
        query(
            settings,
            "SELECT started_at, finished_at FROM ingest_runs WHERE started_by LIKE %s AND started_at >= %s",
            f"airflow {dag_id} %",
            since,
        )  # fmt: skip
        for dag_id, settings in (("tidemark_ingest", events), ("tidemark_ingest__web", web))
    ]
    assert all(spans), spans
    assert any(e0 < w1 and w0 < e1 for e0, e1 in spans[0] for w0, w1 in spans[1]), f"no two runs overlapped: {spans}"
    # Web's runs wrote web's schema and folder only, and web is exact: every offset of its topic in
    # exactly one of its record tables, its sessions the same in Delta and PostgreSQL, reconcile green.
    assert query(web, "SELECT DISTINCT topic FROM ledger_batches") == [(web.topic,)]
    assert query(events, "SELECT count(*) FROM ledger_batches WHERE topic = %s", web.topic) == [(0,)]
    assert web.table_path("events") == f"{events.lake_root}/web/events"
    assert_offset_coverage(spark, web, sum(r.end for r in latest_ranges(web, web.topic)))
    assert_settings_sinks_agree(spark, web, "")
    report = reconcile.run(web, "both-web", lambda: spark)
    assert report is not None
    assert report.status == "ok", report.findings()


def test_the_metrics_a_prometheus_scrape_reads_are_the_databases_numbers(airflow: AirflowServices) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from spark_jobs import db
    from spark_jobs.store import quarantine

    settings = airflow.settings
    token = Api(airflow).token
    scrape = urllib.request.Request(airflow.url + "/tidemark/metrics", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(scrape, timeout=30) as response:
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = response.read().decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    totals = query(
        settings,
        "SELECT pipeline, topic, count(*), sum(records_read), sum(accepted), sum(duplicates), sum(quarantined) "
        "FROM ledger_batches GROUP BY 1, 2",
    )
    assert totals, "the module's earlier tests committed batches"
    for pipeline, topic, batches, *outcomes in totals:  # the ledger's pipeline: ingest:<topic> or backfill:<topic>
        labels = (("pipeline", "events"), ("run", pipeline.split(":")[0]), ("topic", topic))
        assert samples[("tidemark_batches_total", labels)] == batches
        for outcome, n in zip(("read", "accepted", "duplicate", "quarantined"), outcomes, strict=True):
            assert samples[("tidemark_records_total", (("outcome", outcome), *labels))] == n, (pipeline, outcome)
    [(status,)] = query(settings, "SELECT status FROM reconcile_runs ORDER BY counted_at DESC LIMIT 1")
    assert samples[("tidemark_verdict", (("pipeline", "events"), ("status", status)))] == 1
    [(open_findings,)] = query(settings, "SELECT count(*) FROM findings WHERE closed_at IS NULL")
    assert sum(v for (name, _), v in samples.items() if name == "tidemark_open_findings") == open_findings
    # What is in quarantine now, per reason, as `tidemark quarantine` says it.
    with db.transaction(settings.pipeline_dsn) as cur:
        left = {t.reason: t.records for t in quarantine.totals(cur)}
    assert left, "the module's earlier tests quarantined records"
    shown = {
        dict(labels)["reason"]: v
        for (name, labels), v in samples.items()
        if name == "tidemark_quarantined_records" and dict(labels)["pipeline"] == "events"
    }
    assert shown == left
    # Lag: per partition, the latest sample a reconcile run or a scheduled ingest run took.
    lag = query(
        settings,
        """SELECT DISTINCT ON (topic, kafka_partition) topic, kafka_partition, behind_records FROM (
               SELECT r.counted_at AS at, l.* FROM reconcile_lag AS l JOIN reconcile_runs AS r USING (run_id)
               UNION ALL
               SELECT i.finished_at, l.* FROM ingest_lag AS l JOIN ingest_runs AS i USING (run_id)) AS samples
           ORDER BY topic, kafka_partition, at DESC""",
    )
    assert lag
    for topic, partition, behind in lag:
        labels = (("partition", str(partition)), ("pipeline", "events"), ("topic", topic))
        assert samples[("tidemark_lag_records", labels)] == behind
    finished = query(settings, "SELECT pipeline, topic, max(finished_at) FROM ingest_runs GROUP BY 1, 2")
    assert finished, "the module's Airflow runs of tidemark_ingest finished"
    for pipeline, topic, at in finished:
        labels = (("pipeline", "events"), ("run", pipeline.split(":")[0]), ("topic", topic))
        assert samples[("tidemark_last_run_timestamp_seconds", labels)] == at.timestamp()

    # A scrape without a login is refused (a scraper uses an Airflow token, or TIDEMARK_METRICS_TOKEN).
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(airflow.url + "/tidemark/metrics", timeout=30)
    assert refused.value.code == 401


def test_a_broken_pipelines_file_leaves_every_good_pipeline_scheduled_on_the_page_and_in_the_metrics(
    airflow: AirflowServices, browser
) -> None:
    """An unclosed quote in web's entry: events runs on, web stays listed with the YAML line (the page's banner,
    a metric an alert fires on, its DAG's doc) and its run fails with that line, once; a file with no document
    at all still leaves the page and every pipeline's series up."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    path = airflow.settings.pipelines_file
    good = path.read_text()
    web_topic = airflow.settings.declared("web").topic
    assert good.count(f"topic: {web_topic}\n") == 1
    api = Api(airflow)
    try:
        path.write_text(good.replace(f"topic: {web_topic}\n", f"topic: '{web_topic}\n"))
        samples = scrape(airflow)
        assert samples[("tidemark_config_ok", ())] == 0
        assert samples[("tidemark_pipeline_problems", (("pipeline", "events"),))] == 0
        assert samples[("tidemark_pipeline_problems", (("pipeline", "web"),))] == 1
        assert samples[("tidemark_kafka_up", (("pipeline", "events"),))] == 1  # events' lag, measured
        assert any(name == "tidemark_open_findings" and ("pipeline", "web") in labels for name, labels in samples)

        sign_in(browser, airflow)
        browser.get(airflow.url + "/tidemark/")
        banner = WebDriverWait(browser, 30).until(lambda d: d.find_element(By.ID, "file-problems"))
        assert f"The pipelines file {path} has problems." in banner.text
        assert "pipelines.yaml: pipeline 'web': not valid YAML at line " in banner.text, banner.text
        rows = {r.text.split()[0]: r.text for r in browser.find_elements(By.CSS_SELECTOR, "#pipelines tr")[1:]}
        assert set(rows) == {"events", "web"} and "cannot run: pipelines.yaml: pipeline 'web'" in rows["web"]
        assert "cannot run" not in rows["events"] and "Kafka unreachable" not in rows["events"], rows["events"]

        # Airflow: events' and web's DAGs stay, web's says why; its run fails at once with the line, not retried.
        # (The DAG processor parses each DAG file in its turn: the import error and web's DAG change in theirs.)
        def reparsed() -> bool:
            doc = api.get("/api/v2/dags/tidemark_ingest__web/details")["doc_md"] or ""
            return api.get("/api/v2/importErrors")["total_entries"] > 0 and "not valid YAML" in doc

        until_parsed = time.monotonic() + 300
        while not reparsed() and time.monotonic() < until_parsed:
            time.sleep(5)
        [error] = api.get("/api/v2/importErrors")["import_errors"]
        assert "pipeline 'web': not valid YAML" in error["stack_trace"]
        assert api.get("/api/v2/dags/tidemark_ingest")["dag_id"] == "tidemark_ingest"
        doc = api.get("/api/v2/dags/tidemark_ingest__web/details")["doc_md"]
        assert doc.startswith("**Every run of this pipeline fails") and "not valid YAML" in doc, doc[:300]
        api.patch("/api/v2/dags/tidemark_ingest__web", {"is_paused": False})
        run = api.post("/api/v2/dags/tidemark_ingest__web/dagRuns", {"logical_date": None})
        finished = api.wait_for_runs("tidemark_ingest__web", "manual", 1)
        [done] = [r for r in finished if r["dag_run_id"] == run["dag_run_id"]]
        assert done["state"] == "failed"
        task = api.get(f"/api/v2/dags/tidemark_ingest__web/dagRuns/{urllib.parse.quote(run['dag_run_id'])}"
                       "/taskInstances/ingest")  # fmt: skip
        assert task["state"] == "failed" and task["try_number"] == 1, task
        log = api.get(f"/api/v2/dags/tidemark_ingest__web/dagRuns/{urllib.parse.quote(run['dag_run_id'])}"
                      "/taskInstances/ingest/logs/1?full_content=true")  # fmt: skip
        assert "pipeline 'web' cannot run: pipelines.yaml: pipeline 'web': not valid YAML" in json.dumps(log)

        # No document at all: the page and the series of every pipeline the database holds stay up.
        path.write_text("pipelines: [\n")
        samples = scrape(airflow)
        assert samples[("tidemark_config_ok", ())] == 0
        assert {dict(labels)["pipeline"] for name, labels in samples if name == "tidemark_pipeline_problems"} == {
            "events", "web"
        }  # fmt: skip
        assert samples[("tidemark_pipeline_problems", (("pipeline", "events"),))] == 1  # the file's line
        assert any(name == "tidemark_open_findings" and ("pipeline", "events") in labels for name, labels in samples)
        browser.get(airflow.url + "/tidemark/")
        banner = WebDriverWait(browser, 30).until(lambda d: d.find_element(By.ID, "file-problems"))
        assert "pipelines.yaml: not valid YAML at line 2" in banner.text, banner.text
    finally:
        path.write_text(good)
        api.patch("/api/v2/dags/tidemark_ingest__web", {"is_paused": True})
    assert scrape(airflow)[("tidemark_config_ok", ())] == 1


def test_the_lag_a_scrape_reads_grows_while_ingest_is_stalled(airflow: AirflowServices) -> None:
    """Records arrive and no ingest runs: every scrape measures the lag again, so its age grows with the wait."""
    settings = airflow.settings
    produce(settings, ProduceSpec(count=20, entities=2, seed=33, id_prefix="stalled-"), topic=settings.topic)

    def events(samples: dict, name: str) -> list[float]:
        return [v for (n, labels), v in samples.items() if n == name and ("pipeline", "events") in labels]

    def behind(samples: dict, name: str) -> float:
        return sum(events(samples, name))

    first = scrape(airflow)
    time.sleep(4)
    then = scrape(airflow)
    assert first[("tidemark_kafka_up", (("pipeline", "events"),))] == 1
    assert behind(first, "tidemark_lag_records") >= 20
    assert behind(then, "tidemark_lag_records") == behind(first, "tidemark_lag_records")
    assert max(events(then, "tidemark_lag_seconds")) - max(events(first, "tidemark_lag_seconds")) >= 3
    measured = ("tidemark_lag_measured_timestamp_seconds", (("pipeline", "events"),))
    assert then[measured] - first[measured] >= 4
