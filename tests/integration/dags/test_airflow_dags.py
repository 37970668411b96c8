"""The three DAGs end to end with ``dag.test()``: real Airflow, spark-submit, Kafka, Delta, PostgreSQL.

Each test gets its own topic, lake, checkpoints and PostgreSQL database; connections come from
``AIRFLOW_CONN_*`` variables exactly as ``make airflow`` sets them.
"""

from __future__ import annotations

import json
import os
import re
import socket
import threading
import time
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from urllib.parse import urlencode

import pytest
from psycopg2.extensions import parse_dsn

from spark_jobs.offsets import latest_ranges
from spark_jobs.settings import PROJECT_ROOT, Settings
from spark_jobs.spark import QUICK_COMPILER, archive_complete
from tests.integration.spark_jobs.checks import delete_records, driver_jvm_options, query
from tidemark.producer import ProduceSpec, produce

# Airflow itself (dag.test, the api-server and a browser): `make test-airflow`, not `make test`.
pytestmark = pytest.mark.airflow


def airflow_connections(settings: Settings) -> dict[str, str]:
    dsn = parse_dsn(settings.postgres_dsn)
    return {
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
        "AIRFLOW_CONN_TIDEMARK_KAFKA": json.dumps(
            {"conn_type": "generic", "extra": {"bootstrap.servers": settings.bootstrap_servers}}
        ),
        "AIRFLOW_CONN_TIDEMARK_POSTGRES": json.dumps(
            {
                "conn_type": "postgres",
                "host": dsn["host"],
                "port": int(dsn["port"]),
                "schema": dsn["dbname"],
                "login": dsn["user"],
            }
        ),
    }


@pytest.fixture
def deployment(database: Settings, topic: str, airflow_db, monkeypatch):
    """Settings for this test (own topic, lake, database) and the environment Airflow runs with."""
    home = database.home / "runs" / uuid.uuid4().hex[:8]
    settings = replace(
        database,
        lake_root=str(home / "lake"),
        checkpoint_root=str(home / "checkpoints"),
        topic=topic,
        shuffle_partitions=2,
    )
    env = settings.to_env() | airflow_connections(settings)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return settings


@pytest.fixture
def webhook(monkeypatch):
    """A local HTTP server standing in for Slack; yields the JSON bodies it received."""
    received: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # http.server's naming
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append({"path": self.path, "json": json.loads(body)})
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args) -> None:  # keep the test output quiet
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_port}/services/alert"
    monkeypatch.setenv("AIRFLOW_CONN_TIDEMARK_ALERT_WEBHOOK", json.dumps({"conn_type": "http", "host": url}))
    yield received
    server.shutdown()


def load_dag(dag_id: str):
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(PROJECT_ROOT / "dags"))
    assert not bag.import_errors, bag.import_errors
    return bag.get_dag(dag_id)


def state(run) -> str:  # DagRun
    return str(getattr(run.state, "value", run.state))


def task_states(run) -> dict[str, str]:  # DagRun
    return {ti.task_id: str(getattr(ti.state, "value", ti.state)) for ti in run.get_task_instances()}


def loopback(address: str) -> bool:
    """127.0.0.1, ::1, or 127.0.0.1 as an IPv6 socket shows it (::ffff:127.0.0.1)."""
    import ipaddress

    ip = ipaddress.ip_address(address)
    return (getattr(ip, "ipv4_mapped", None) or ip).is_loopback


class ListeningSockets:
    """The listening TCP sockets of the Spark jobs a DAG task run by this process submits (the
    ``spark-submit`` JVM, its Python driver and their workers), sampled while it runs, and the
    command lines of the processes that start them."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.seen: set[tuple[str, int]] = set()
        self.commands: set[tuple[str, ...]] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        import psutil

        me = psutil.Process()
        while not self._stop.is_set():
            for proc in me.children(recursive=True):
                try:
                    argv = tuple(proc.cmdline())
                    command = " ".join(argv)
                    if "org.apache.spark.deploy.SparkSubmit" not in command or self.name not in command:
                        continue
                    self.commands.add(argv)
                    for p in [proc, *proc.children(recursive=True)]:
                        self.seen |= {(c.laddr.ip, c.laddr.port) for c in p.net_connections("tcp")
                                      if c.status == psutil.CONN_LISTEN}  # fmt: skip
                except psutil.Error:  # it ended meanwhile
                    pass
            time.sleep(0.2)

    def __enter__(self) -> ListeningSockets:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def test_ingest_dag_runs_the_scheduled_ingest_through_spark_submit(deployment: Settings, capfd) -> None:
    settings = deployment
    report = produce(settings, ProduceSpec(count=400, entities=8, duplicate_rate=0.05, seed=3), topic=settings.topic)

    capfd.readouterr()
    with ListeningSockets("tidemark-ingest") as sockets:
        run = load_dag("tidemark_ingest").test()
    assert state(run) == "success", task_states(run)
    # The task log (dag.test() prints it) has the job's summary, not Spark's log lines.
    printed = capfd.readouterr()
    log = printed.out + printed.err
    assert f"ingest:{settings.topic} batch 0: read" in log, log[-3000:]
    spark_lines = [line for line in log.splitlines() if re.search(r"\d\d:\d\d:\d\d (INFO|WARN) [A-Za-z]+: ", line)]
    assert spark_lines == [], spark_lines[:20]
    assert "WARNING: Using incubator modules" not in log, log[-3000:]  # the JVM's notice of Spark's module
    # A run of a few hundred records: its driver JVM ran with HotSpot's quick compiler alone.
    assert re.search(rf"about [\d,]+ records to read: the driver JVM compiles with {QUICK_COMPILER}", log), log[-3000:]
    assert QUICK_COMPILER in driver_jvm_options(sockets.commands), sockets.commands
    # Its classes: from the class archive, or written to it as the JVM exits, as the log says.
    logged = re.search(r"the driver JVM (maps its classes from|writes the classes it loads to) (\S+)", log)
    assert logged, log[-3000:]
    option = "-XX:SharedArchiveFile=" if logged[1].startswith("maps") else "-XX:ArchiveClassesAtExit="
    assert option + logged[2] in driver_jvm_options(sockets.commands), sockets.commands
    assert archive_complete(Path(logged[2]))  # the task ended after the JVM had written it
    assert query(settings, "SELECT started_by FROM ingest_runs") == [(f"airflow tidemark_ingest {run.run_id}",)]
    # The embedded default (a local master) listens on loopback only, and without the Spark UI.
    assert sockets.seen, "the Spark job listens on some port (its driver)"
    assert all(loopback(ip) for ip, _ in sockets.seen), sockets.seen
    assert 4040 not in {port for _, port in sockets.seen}, sockets.seen
    pipeline = f"ingest:{settings.topic}"
    [(read, batches)] = query(
        settings, "SELECT sum(records_read), count(*) FROM ledger_batches WHERE pipeline = %s", pipeline
    )
    assert read == report.committed and batches >= 1
    assert query(settings, "SELECT count(*) FROM sessions")[0][0] > 0
    # The Asset event says what the run committed.
    from airflow.models.asset import AssetEvent
    from airflow.utils.session import create_session

    with create_session() as session:
        [extra] = [e.extra for e in session.query(AssetEvent).filter(AssetEvent.source_run_id == run.run_id)]
    assert extra["records_read"] == report.committed and extra["batches"] == batches
    assert extra["accepted"] + extra["duplicates"] + extra["quarantined"] == report.committed
    assert all(r["pipeline"] == pipeline and r["offsets"] for r in extra["ranges"])


def test_backfill_dag_dry_run_writes_nothing_and_a_real_run_processes_the_plan(deployment: Settings) -> None:
    settings = deployment
    report = produce(settings, ProduceSpec(count=120, entities=12, seed=8), topic=settings.topic, partitions=2)
    held = {r.partition: r.end for r in latest_ranges(settings, settings.topic)}
    assert all(held.values()), held
    planned = [(p, 0, end // 2) for p, end in sorted(held.items())]  # the first half of each partition
    offsets = ",".join(f"{p}:{start}-{end}" for p, start, end in planned)
    dag = load_dag("tidemark_backfill")

    dry = dag.test(run_conf={"topic": settings.topic, "offsets": offsets, "dry_run": True})
    assert task_states(dry) == {"plan": "success", "anything_to_do": "success", "backfill": "skipped"}
    assert query(settings, "SELECT count(*) FROM ledger_batches")[0][0] == 0

    run = dag.test(run_conf={"topic": settings.topic, "offsets": offsets, "dry_run": False})
    assert task_states(run)["backfill"] == "success"
    ranges = query(settings, "SELECT kafka_partition, start_offset, end_offset FROM ledger_ranges ORDER BY 1")
    assert ranges == planned
    assert query(settings, "SELECT sum(records_read) FROM ledger_batches")[0][0] == sum(e for _, _, e in planned)
    assert sum(e for _, _, e in planned) < report.committed

    # The same plan again is a no-op: marked by a skipped backfill task, not a green run that did nothing.
    again = dag.test(run_conf={"topic": settings.topic, "offsets": offsets, "dry_run": False})
    assert task_states(again) == {"plan": "success", "anything_to_do": "success", "backfill": "skipped"}
    assert query(settings, "SELECT count(*) FROM ledger_batches")[0][0] == 1


def test_backfill_dag_rejects_bad_parameters_before_spark_starts_without_paging(deployment: Settings, webhook) -> None:
    settings = deployment
    produce(settings, ProduceSpec(count=20, entities=2, seed=1), topic=settings.topic, partitions=1)
    dag = load_dag("tidemark_backfill")
    bad = {"topic": settings.topic, "from_time": "2026-11-21T10:00:00+00:00", "to_time": "2026-11-21T09:00:00+00:00"}
    run = dag.test(run_conf=bad)
    states = task_states(run)
    assert states["plan"] == "failed" and states["backfill"] in ("upstream_failed", "skipped")
    assert query(settings, "SELECT count(*) FROM ledger_batches")[0][0] == 0
    assert webhook == [], "a form to fix is not an alert"


def test_a_backfill_of_offsets_retention_removed_fails_its_plan_until_the_form_acknowledges_the_loss(
    deployment: Settings, webhook
) -> None:
    settings = deployment
    produce(settings, ProduceSpec(count=30, entities=3, seed=2), topic=settings.topic, partitions=1)
    delete_records(settings, 0, 10)
    dag = load_dag("tidemark_backfill")
    asked = {"topic": settings.topic, "offsets": "0:0-30"}

    refused = dag.test(run_conf=asked)
    assert task_states(refused)["plan"] == "failed" and task_states(refused)["backfill"] in (
        "upstream_failed",
        "skipped",
    )
    assert query(settings, "SELECT count(*) FROM ledger_batches")[0][0] == 0 and webhook == []

    run = dag.test(run_conf={**asked, "allow_data_loss": True})
    assert task_states(run)["backfill"] == "success"
    assert query(settings, "SELECT start_offset, end_offset FROM ledger_ranges") == [(0, 30)]
    assert query(settings, "SELECT start_offset, end_offset FROM retention_losses") == [(0, 10)]
    assert query(settings, "SELECT records_read FROM ledger_batches") == [(20,)]


def test_reconcile_alerts_once_naming_the_damage_and_the_repair_dag_brings_it_back_to_green(
    deployment: Settings, webhook, monkeypatch
) -> None:
    settings = deployment
    produce(settings, ProduceSpec(count=600, entities=10, malformed_rate=0.05, seed=5), topic=settings.topic)
    # Batches of at most 250 records: the run ingests the 600 in three (83 + 83 + 83 per partition, then the rest).
    monkeypatch.setenv("TIDEMARK_MAX_OFFSETS_PER_TRIGGER", "250")
    ingest = load_dag("tidemark_ingest")
    assert state(ingest.test()) == "success"
    pipeline = f"ingest:{settings.topic}"
    assert len(query(settings, "SELECT 1 FROM ledger_batches WHERE pipeline = %s", pipeline)) == 3
    reconcile = load_dag("tidemark_reconcile")

    ok = reconcile.test()
    assert task_states(ok) == {"check": "success", "reconcile": "success", "verdict": "success"}
    [(status, checked, mismatched, used_spark)] = query(
        settings, "SELECT status, ranges_checked, ranges_mismatched, used_spark FROM reconcile_runs"
    )
    assert (status, mismatched, used_spark) == ("ok", 0, True) and checked >= 1
    # Nothing new: checked without Spark, the Spark task skipped.
    quiet = reconcile.test()
    assert task_states(quiet) == {"check": "success", "reconcile": "skipped", "verdict": "success"}
    assert query(settings, "SELECT used_spark FROM reconcile_runs WHERE run_id = %s", quiet.run_id) == [(False,)]
    assert webhook == []

    # Behind tidemark's back: remove sessions from PostgreSQL, and lose the ledger row of the middle
    # batch (a gap between scheduled batches).
    gone = query(
        settings,
        "DELETE FROM sessions WHERE session_id IN (SELECT session_id FROM sessions ORDER BY 1 LIMIT 2) "
        "RETURNING entity_id, session_id",
    )
    [(middle,)] = query(
        settings, "SELECT batch_id FROM ledger_batches WHERE pipeline = %s ORDER BY batch_id LIMIT 1 OFFSET 1", pipeline
    )
    [(p, start, end)] = query(
        settings,
        "SELECT kafka_partition, start_offset, end_offset FROM ledger_ranges "
        "WHERE pipeline = %s AND batch_id = %s AND end_offset > start_offset ORDER BY 1 LIMIT 1",
        pipeline,
        middle,
    )
    query(settings, "DELETE FROM ledger_batches WHERE pipeline = %s AND batch_id = %s", pipeline, middle)

    failed = reconcile.test()
    assert task_states(failed) == {"check": "success", "reconcile": "success", "verdict": "failed"}
    [(status, report)] = query(settings, "SELECT status, report FROM reconcile_runs WHERE run_id = %s", failed.run_id)
    assert status == "mismatch"
    assert f"gap: topic {settings.topic} partition {p} offsets [{start}, {end})" in report
    assert len(webhook) == 1 and webhook[0]["path"] == "/services/alert"
    text = webhook[0]["json"]["text"]
    assert "tidemark_reconcile.verdict failed" in text
    assert f"partition {p} offsets [{start}, {end})" in text
    assert all(session_id[:8] in text for _, session_id in gone), text
    assert f"tidemark repair --run-id {failed.run_id}" in text and text.count(failed.run_id) <= 4
    form = "/tidemark/repair?" + urlencode({"reconcile_run_id": failed.run_id})
    assert form in text, text  # the repair form, filled in (followed in a browser by test_airflow_ui)

    # Nothing repaired yet: a run by hand stays red and alerts again, as the daily run does.
    still = reconcile.test()
    assert task_states(still)["verdict"] == "failed" and len(webhook) == 2
    assert f"partition {p} offsets [{start}, {end})" in webhook[1]["json"]["text"]
    assert query(settings, "SELECT opened_findings FROM reconcile_runs WHERE run_id = %s", still.run_id) == [(0,)]
    # The run an ingest's asset triggers, finding nothing new, is red too but pages no one again.
    from types import SimpleNamespace

    from airflow.utils.types import DagRunType

    from tidemark_airflow.notifiers import AlertNotifier, StillOpen
    from tidemark_airflow.operators import VerdictOperator

    verdict = VerdictOperator(task_id="verdict", reconcile_run_id=still.run_id)
    with pytest.raises(StillOpen) as raised:
        verdict.execute({"dag_run": SimpleNamespace(run_type=DagRunType.ASSET_TRIGGERED)})
    assert f"partition {p} offsets [{start}, {end})" in str(raised.value)
    AlertNotifier().notify({"exception": raised.value, "run_id": still.run_id})
    assert len(webhook) == 2

    repair = load_dag("tidemark_repair")
    unknown = repair.test(run_conf={"reconcile_run_id": "no-such-run"})
    assert task_states(unknown)["plan"] == "failed" and len(webhook) == 2, "a bad request pages no one"
    fixed = repair.test(run_conf={"reconcile_run_id": failed.run_id})
    assert task_states(fixed) == {"plan": "success", "repair": "success", "verdict": "success"}
    [(repair_status, recheck)] = query(
        settings, "SELECT status, recheck_run FROM repairs WHERE reconcile_run = %s", failed.run_id
    )
    assert repair_status == "ok" and recheck
    assert len(query(settings, "SELECT 1 FROM sessions WHERE session_id = ANY(%s)", [s for _, s in gone])) == 2
    green = reconcile.test()
    assert task_states(green)["verdict"] == "success" and len(webhook) == 2


def test_a_failing_task_alerts_without_the_password_in_the_alert_or_any_log(
    deployment: Settings, webhook, monkeypatch, capfd
) -> None:
    canary = "canary-Pw-5f3a9e"
    with socket.socket() as sock:  # a port nothing listens on: PostgreSQL is "down"
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    down = json.loads(os.environ["AIRFLOW_CONN_TIDEMARK_POSTGRES"]) | {"port": port, "password": canary}
    monkeypatch.setenv("AIRFLOW_CONN_TIDEMARK_POSTGRES", json.dumps(down))

    dag = load_dag("tidemark_reconcile")
    for task in dag.tasks:  # the alert comes with the last try; the retry's two minutes prove nothing here
        task.retries = 0
    run = dag.test()
    assert task_states(run)["check"] == "failed"
    [alert] = webhook
    text = alert["json"]["text"]
    assert f"cannot connect to PostgreSQL at 127.0.0.1:{port}" in text and canary not in text, text
    # dag.test() writes the task logs (the error, the notifier's line) to the console, not to files.
    printed = capfd.readouterr()
    output = printed.out + printed.err
    assert "cannot connect to PostgreSQL" in output and "tidemark alert" in output
    assert canary not in output
    logs = Path(os.environ["AIRFLOW_HOME"]) / "logs"
    assert not [p for p in logs.rglob("*") if p.is_file() and canary in p.read_text(errors="ignore")]


def test_an_ingest_whose_producers_broke_the_requirements_succeeds_and_alerts(deployment: Settings, webhook) -> None:
    from spark_jobs.offsets import ensure_topic
    from tests.integration.spark_jobs.checks import send_to

    settings = deployment
    ensure_topic(settings, settings.topic, 2, "CreateTime")  # producer-stamped times
    at = datetime(2026, 3, 1, tzinfo=UTC)
    send_to(settings, settings.topic, [(0, "e1", "x1", at), (1, "e1", "x2", at + timedelta(seconds=1))])

    run = load_dag("tidemark_ingest").test()
    assert state(run) == "success", task_states(run)
    [alert] = webhook
    text = alert["json"]["text"]
    assert text.startswith("tidemark alert: tidemark_ingest run ")
    assert f"the producers of topic {settings.topic} broke" in text
    assert "1 entities in many partitions, 2 not log append time" in text


def test_readmit_dag_dry_run_logs_per_reason_what_would_come_back_and_changes_nothing(
    deployment: Settings, spark, capfd
) -> None:
    """The form through the plan task to the job's spark-submit; the counts are the job's (tests/integration/
    spark_jobs/test_readmit.py brings records back after a contract fix)."""
    from spark_jobs import ingest

    settings = deployment
    produce(settings, ProduceSpec(count=60, entities=4, malformed_rate=0.2, seed=21), topic=settings.topic)
    ingest.run_scheduled(spark, settings)
    [(quarantined,)] = query(settings, "SELECT sum(records) FROM quarantine_reasons")
    assert quarantined > 0

    capfd.readouterr()
    run = load_dag("tidemark_readmit").test(run_conf={"dry_run": True})
    assert state(run) == "success", task_states(run)
    printed = capfd.readouterr()
    log = printed.out + printed.err
    assert "readmit (dry run): every quarantined record" in log, log[-3000:]
    assert "0 records would come back; run without --dry-run to readmit them" in log, log[-3000:]
    per_reason = re.findall(r"  \S.*: ([\d,]+) quarantined, 0 would come back", log)
    counted = sum(int(n.replace(",", "")) for n in per_reason)
    assert counted == quarantined, log[-3000:]
    assert query(settings, "SELECT count(*) FROM ledger_batches WHERE left(pipeline, 8) = 'readmit:'") == [(0,)]


def test_maintenance_dag_compacts_the_lake_through_spark_submit(deployment: Settings, spark, capfd) -> None:
    from spark_jobs import ingest
    from spark_jobs.maintenance import live_files

    settings = deployment
    produce(settings, ProduceSpec(count=200, entities=4, seed=12), topic=settings.topic, partitions=2)
    ingest.run_scheduled(spark, settings, max_offsets_per_trigger=100)  # batches under the cap: a file each
    events = settings.table_path("events")
    assert live_files(spark, events) >= 2

    capfd.readouterr()
    run = load_dag("tidemark_maintenance").test()
    assert state(run) == "success", task_states(run)
    assert live_files(spark, events) == 1
    # It reads at most the 200 records the pipeline stores: its driver compiles with the quick compiler.
    printed = capfd.readouterr()
    log = printed.out + printed.err
    assert f"about 200 records to read: the driver JVM compiles with {QUICK_COMPILER}" in log, log[-3000:]


def test_a_spark_job_that_fails_on_something_to_fix_alerts_with_the_cause_first(deployment: Settings, webhook) -> None:
    """Records retention removed before the first run: the ingest job refuses in one line. The task's
    error, and the alert, begin with that line, not with spark-submit's command and its output."""
    settings = deployment
    produce(settings, ProduceSpec(count=40, entities=4, seed=31), topic=settings.topic, partitions=1)
    delete_records(settings, 0, 10)
    dag = load_dag("tidemark_ingest")
    for task in dag.tasks:  # the alert comes with the last try
        task.retries = 0
    run = dag.test()
    assert task_states(run)["ingest"] == "failed"
    [alert] = webhook
    subject, cause, *rest = alert["json"]["text"].splitlines()
    assert subject.startswith("tidemark alert: tidemark_ingest.ingest failed in run"), subject
    removed = f"topic {settings.topic}: partition 0 offsets [0, 10) were removed by Kafka's retention"
    assert cause.startswith(removed), cause
    assert "allow_data_loss" in cause and "Cannot execute" not in alert["json"]["text"]
    assert rest == ["(the ingest job failed: its output is in this task's log)"], rest
