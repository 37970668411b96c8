"""The compose stack end to end: ``make compose-test`` (marker ``compose``; not part of ``make test``).

docker-compose.yaml with docker-compose.local.yaml (the images ``make images`` built on this host)
runs under its own project name, on free loopback ports, with a generated env file of random
passwords (``.tidemark/compose-test/compose.env``). The test produces events into the stack's Kafka
with ``tidemark produce`` inside the scheduler container, triggers ``tidemark_ingest`` and then
``tidemark_reconcile`` through Airflow's REST API on the api-server container, and checks:

* both runs succeed;
* the Spark master lists the ingest application as finished, and the worker container's own
  ``/json/`` lists that application's finished executors, whose logs show them connecting to the
  driver at the scheduler container's address on the compose network;
* the ledger covers exactly the committed records, and the sessions in PostgreSQL are exactly the
  ones the records on the topic make (read back from the published Kafka port);
* the reconcile run recorded ``ok``; the pipeline role can neither create a table nor write
  ``schema_migrations``; the Spark master's REST submission port is closed; every published port
  is bound to 127.0.0.1;
* a second pipeline, declared only in the pipelines file the stack mounts over the image's
  (``TIDEMARK_PIPELINES_FILE``), gets its schema from airflow-init and its DAGs in Airflow;
* the schema registry keeps its schemas in the stack's PostgreSQL and refuses a version that cannot
  read older records (BACKWARD); an Avro pipeline (docs/avro.md's ``orders``) ingests Avro records
  through its DAG, the executors on the worker fetching the writer schema from the registry, and
  quarantines each unreadable kind with its reason;
* ``docker compose down -v`` leaves no container, volume or network of the project.
"""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from subprocess import CompletedProcess
from typing import TypeVar

import pytest
import yaml

from spark_jobs.pipeline_names import DAG_KINDS, PipelineNames
from tests.ports import free_port
from tidemark.demo_avro import SCHEMA, orders_entry

# pyproject's 900 s per test is too short for a shared 2-core machine: the stack's start counts
# towards the first test, ingest and reconcile (two Spark applications) towards the second.
pytestmark = [pytest.mark.compose, pytest.mark.timeout(2700)]

T = TypeVar("T")
ROOT = Path(__file__).resolve().parents[2]
WORK = ROOT / ".tidemark" / "compose-test"
ENV_FILE = WORK / "compose.env"
PIPELINES_FILE = WORK / "pipelines.yaml"
PROJECT = "tidemark-compose-test"
FILES = ("-f", str(ROOT / "docker-compose.yaml"), "-f", str(ROOT / "docker-compose.local.yaml"))
LONG_RUNNING = ("kafka", "postgres", "schema-registry", "spark-master", "spark-worker", "airflow-apiserver",
                "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer")  # fmt: skip
EVENTS = 3000
ENTITIES = 40
PREFIX = "ct-"
# The second pipeline, in the mounted file only: paused, on a schedule that never comes in the test.
SECOND = {"name": "web", "schedule": "0 0 1 1 *", "contract": {
    "schema": {"type": "object", "required": ["messageId", "userId", "timestamp"], "properties": {
        "messageId": {"type": "string"}, "userId": {"type": "string"},
        "timestamp": {"type": "string", "format": "date-time"}}},
    "event_id": "/messageId", "entity_id": "/userId", "event_time": "/timestamp",
    "key_is_entity_id": False}}  # fmt: skip
# The Avro pipeline (docs/avro.md's example), on a schedule that never comes in the test.
AVRO = {**orders_entry("shop.orders"), "schedule": "0 0 1 1 *"}
AVRO_EVENTS = 400


def compose(*args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
    argv = ["docker", "compose", "-p", PROJECT, "--env-file", str(ENV_FILE), *FILES, *args]
    result = subprocess.run(
        argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=os.environ | {"COMPOSE_BAKE": "false"}
    )
    if check and result.returncode != 0:
        raise AssertionError(f"{' '.join(args)} exited with {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return result


def exec_in(service: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return compose("exec", "-T", service, *argv, check=check)


def psql(
    sql: str, user: str = "postgres", password: str | None = None, check: bool = True, database: str = "tidemark"
) -> CompletedProcess:
    """``sql`` on ``database`` inside the postgres container, over TCP as ``user`` (by default the
    superuser, with POSTGRES_PASSWORD from the generated env file)."""
    if password is None:
        env = dict(line.split("=", 1) for line in ENV_FILE.read_text().splitlines())
        password = env["POSTGRES_PASSWORD"].strip("'")
    return exec_in(
        "postgres", "env", f"PGPASSWORD={password}", "psql", "-h", "127.0.0.1", "-U", user, "-d", database,
        "-v", "ON_ERROR_STOP=1", "-X", "-At", "-F", "|", "-c", sql, check=check,
    )  # fmt: skip


def wait_for(condition: Callable[[], T | None], timeout: float, what: str) -> T:
    """The first true answer of ``condition``, asked every 3 s for ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(3)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


class Stack:
    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.api = f"http://127.0.0.1:{env['AIRFLOW_UI_HOST_PORT']}"
        self.spark_ui = f"http://127.0.0.1:{env['SPARK_UI_HOST_PORT']}"
        self.kafka = f"127.0.0.1:{env['KAFKA_HOST_PORT']}"
        self._token: str | None = None

    # --- Airflow's REST API (Airflow 3: a JWT from /auth/token, then /api/v2) ----------------
    def token(self) -> str:
        if self._token is None:
            body = {"username": "admin", "password": self.env["AIRFLOW_ADMIN_PASSWORD"]}
            self._token = self._request("POST", "/auth/token", body, auth=False)["access_token"]
        return self._token

    def _request(self, method: str, path: str, body: dict | None = None, auth: bool = True) -> dict:
        headers = {"Content-Type": "application/json"}
        if auth:
            headers["Authorization"] = f"Bearer {self.token()}"
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.api + path, data=data, headers=headers, method=method)
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.load(response)

    def airflow(self, method: str, path: str, body: dict | None = None) -> dict:
        return self._request(method, "/api/v2" + path, body)

    def run_dag(self, dag_id: str, timeout: float) -> dict:
        """Unpause ``dag_id``, trigger a run through the API and wait until it ends; the run."""
        wait_for(lambda: self._dag_parsed(dag_id), 300, f"the dag-processor to parse {dag_id}")
        self.airflow("PATCH", f"/dags/{dag_id}", {"is_paused": False})
        run_id = self.airflow("POST", f"/dags/{dag_id}/dagRuns", {"logical_date": None})["dag_run_id"]

        def ended() -> dict | None:
            run = self.airflow("GET", f"/dags/{dag_id}/dagRuns/{run_id}")
            return run if run["state"] in ("success", "failed") else None

        return wait_for(ended, timeout, f"{dag_id} run {run_id}")

    def _dag_parsed(self, dag_id: str) -> bool:
        try:
            return self.airflow("GET", f"/dags/{dag_id}")["dag_id"] == dag_id
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return False
            raise

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str]:
        instances = self.airflow("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances")["task_instances"]
        return {ti["task_id"]: ti["state"] for ti in instances}

    # --- Spark ------------------------------------------------------------------------------
    def spark_master(self) -> dict:
        with urllib.request.urlopen(f"{self.spark_ui}/json/", timeout=10) as response:
            return json.load(response)

    def spark_worker(self) -> dict:
        return json.loads(exec_in("spark-worker", "curl", "-fsS", "http://localhost:8081/json/").stdout)


def generated_env() -> dict[str, str]:
    names = ("POSTGRES_PASSWORD", "AIRFLOW_DB_PASSWORD", "TIDEMARK_OWNER_PASSWORD", "TIDEMARK_PIPELINE_PASSWORD",
             "SCHEMA_REGISTRY_DB_PASSWORD", "AIRFLOW_JWT_SECRET", "AIRFLOW_API_SECRET_KEY",
             "AIRFLOW_ADMIN_PASSWORD")  # fmt: skip
    env = {name: secrets.token_urlsafe(24) for name in names}
    env["AIRFLOW_FERNET_KEY"] = base64.urlsafe_b64encode(secrets.token_bytes(32)).decode()
    ports = ("AIRFLOW_UI_HOST_PORT", "SPARK_UI_HOST_PORT", "SCHEMA_REGISTRY_HOST_PORT", "KAFKA_HOST_PORT")
    env |= {name: str(free_port()) for name in ports}
    # Only the runs the test triggers: the first scheduled interval ends in 2027.
    env["TIDEMARK_INGEST_SCHEDULE"] = "0 0 1 1 *"
    # A team's own pipelines file, mounted over the image's: the shipped pipeline, a second one, an Avro one.
    env["TIDEMARK_PIPELINES_FILE"] = str(PIPELINES_FILE)
    return env


def leftovers() -> dict[str, list[str]]:
    label = f"label=com.docker.compose.project={PROJECT}"
    found = {}
    for kind, argv in {
        "containers": ["docker", "ps", "-a", "-q", "--filter", label],
        "volumes": ["docker", "volume", "ls", "-q", "--filter", label],
        "networks": ["docker", "network", "ls", "-q", "--filter", label],
    }.items():
        found[kind] = subprocess.run(argv, capture_output=True, text=True, check=True).stdout.split()
    return found


@pytest.fixture(scope="module")
def stack():
    if subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        pytest.fail("no Docker engine answers: run `make compose-test` (it starts one as root)")
    WORK.mkdir(parents=True, exist_ok=True)
    env = generated_env()
    ENV_FILE.write_text("".join(f"{name}='{value}'\n" for name, value in env.items()))
    ENV_FILE.chmod(0o600)
    shipped = yaml.safe_load((ROOT / "pipelines.yaml").read_text())["pipelines"]
    PIPELINES_FILE.write_text(yaml.safe_dump({"pipelines": [*shipped, SECOND, AVRO]}, sort_keys=False))
    assert not any(leftovers().values()), f"a previous {PROJECT} is still there: {leftovers()}"
    try:
        up = compose("up", "-d", "--no-build", "--wait", "--wait-timeout", "900", check=False, timeout=1000)
        if up.returncode != 0:
            logs = compose("logs", "--no-color", "--tail", "60", check=False).stdout
            raise AssertionError(f"docker compose up failed:\n{up.stderr}\n{compose('ps', '-a').stdout}\n{logs}")
        yield Stack(env)
    finally:
        (WORK / "compose.log").write_text(compose("logs", "--no-color", "--timestamps", check=False).stdout)
        compose("down", "-v", "--remove-orphans", "--timeout", "30", check=False)


def test_every_service_is_healthy_and_published_on_loopback_only(stack: Stack) -> None:
    states = {s["Service"]: s for s in map(json.loads, compose("ps", "-a", "--format", "json").stdout.splitlines())}
    for name in LONG_RUNNING:
        assert (states[name]["State"], states[name]["Health"] or "healthy") == ("running", "healthy"), states[name]
    assert (states["airflow-init"]["State"], states["airflow-init"]["ExitCode"]) == ("exited", 0)
    published = [
        (name, p["URL"], p["PublishedPort"])
        for name, state in states.items()
        for p in state["Publishers"]
        if p["PublishedPort"]
    ]
    assert {name for name, _, _ in published} == {"kafka", "schema-registry", "spark-master", "airflow-apiserver"}
    assert all(url == "127.0.0.1" for _, url, _ in published), published
    # The master's REST submission server (6066) is off; its cluster port is on.
    probe = "exec 3<>/dev/tcp/spark-master/{}"  # the master binds its container address (--host)
    assert exec_in("spark-master", "bash", "-c", probe.format(7077), check=False).returncode == 0
    assert exec_in("spark-master", "bash", "-c", probe.format(6066), check=False).returncode != 0
    master = stack.spark_master()
    assert master["status"] == "ALIVE"
    assert [w["state"] for w in master["workers"]] == ["ALIVE"]


def test_a_second_pipeline_from_the_mounted_file_gets_its_schema_and_dags(stack: Stack) -> None:
    # airflow-init migrated its schema; the scheduler's tidemark reads the mounted file.
    assert psql("SELECT schema_name FROM information_schema.schemata WHERE schema_name = 'web'").stdout.split() == [
        "web"
    ]
    assert "web" in exec_in("airflow-scheduler", "tidemark", "pipelines").stdout
    # The dag-processor made its DAGs, which the api-server lists.
    expected = {PipelineNames("web").dag_id(kind) for kind in DAG_KINDS}

    def listed() -> set[str] | None:
        dags = {d["dag_id"] for d in stack.airflow("GET", "/dags?limit=100")["dags"]}
        return dags if expected <= dags else None

    dags = wait_for(listed, 300, f"the dag-processor to parse {sorted(expected)}")
    assert {PipelineNames("events").dag_id(kind) for kind in DAG_KINDS} <= dags
    errors = stack.airflow("GET", "/importErrors")["import_errors"]
    assert errors == [], errors


def inspect(service: str) -> dict:
    container = compose("ps", "-q", service).stdout.strip()
    result = subprocess.run(["docker", "inspect", container], capture_output=True, text=True, check=True)
    return json.loads(result.stdout)[0]


def container_ip(service: str) -> str:
    [network] = inspect(service)["NetworkSettings"]["Networks"].values()
    return network["IPAddress"]


def container_names(service: str) -> set[str]:
    """The host name and the address of ``service``'s container on the compose network."""
    return {inspect(service)["Config"]["Hostname"], container_ip(service)}


def read_topic(stack: Stack, topic: str, committed: int) -> list[tuple[int, int, int, dict]]:
    """(partition, offset, broker timestamp in ms, value) of every committed record, from the host."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": stack.kafka, "group.id": f"compose-test-{secrets.token_hex(4)}",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})  # fmt: skip
    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        records: list[tuple[int, int, int, dict]] = []
        deadline = time.monotonic() + 120
        while len(records) < committed and time.monotonic() < deadline:
            message = consumer.poll(1)
            if message is None or message.error():
                continue
            partition, offset, value = message.partition(), message.offset(), message.value()
            assert partition is not None and offset is not None and value is not None  # a record has all three
            records.append((partition, offset, message.timestamp()[1], json.loads(value)))
        assert len(records) == committed
        return records
    finally:
        consumer.close()


def expected_sessions(records: list[tuple[int, int, int, dict]]) -> set[tuple]:
    """One session per entity (the burst is far shorter than the 30-minute gap), made of the first
    arrival of each event_id (later copies are duplicates): (entity, started, ended, first event
    time, last event time, events), times in epoch milliseconds."""
    first: dict[str, tuple[int, dict]] = {}
    for _, _, arrival, value in sorted(records, key=lambda r: (r[2], r[0], r[1])):
        first.setdefault(value["event_id"], (arrival, value))
    by_entity: dict[str, list[tuple[int, int]]] = {}
    for arrival, value in first.values():
        event_ms = round(datetime.fromisoformat(value["event_time"]).timestamp() * 1000)
        by_entity.setdefault(value["entity_id"], []).append((arrival, event_ms))
    return {
        (entity, min(a for a, _ in rows), max(a for a, _ in rows), min(e for _, e in rows), max(e for _, e in rows),
         len(rows))
        for entity, rows in by_entity.items()
    }  # fmt: skip


def test_ingest_and_reconcile_run_through_the_airflow_api_on_the_spark_worker(stack: Stack) -> None:
    produced = exec_in(
        "airflow-scheduler", "tidemark", "produce", "--count", str(EVENTS), "--entities", str(ENTITIES),
        "--duplicate-rate", "0.05", "--seed", "7", "--id-prefix", PREFIX,
    ).stdout  # fmt: skip
    match = re.search(r"produced ([\d,]+) committed records to (\S+) in [\d.]+ s \((.*)\)", produced)
    assert match, produced
    committed, topic = int(match[1].replace(",", "")), match[2]
    kinds = {kind: int(n.replace(",", "")) for kind, n in (part.rsplit(" ", 1) for part in match[3].split(", "))}
    assert committed == EVENTS and sum(kinds.values()) == committed, produced

    run = stack.run_dag("tidemark_ingest", timeout=1200)
    assert run["state"] == "success", stack.task_states("tidemark_ingest", run["dag_run_id"])

    # Spark: the master lists the application as finished, and the worker container ran its executors.
    [app] = [a for a in stack.spark_master()["completedapps"] if a["name"] == "tidemark-ingest"]
    assert app["state"] == "FINISHED", app
    worker = stack.spark_worker()
    executors = [e for e in worker["finishedexecutors"] if e["appid"] == app["id"]]
    assert executors, worker["finishedexecutors"]
    [registered] = [w for w in stack.spark_master()["workers"] if w["id"] == worker["id"]]
    assert registered["host"] == container_ip("spark-worker")
    logs = exec_in("spark-worker", "bash", "-c", f"cat /tmp/spark-work/{app['id']}/*/stderr").stdout
    # The driver (spark-submit in the scheduler container) advertises its container's host name
    # (Docker's DNS resolves it on the compose network) or address, not the worker's.
    [driver] = set(re.findall(r"Connecting to driver: spark://CoarseGrainedScheduler@([^:]+):\d+", logs))
    assert driver in container_names("airflow-scheduler"), driver
    assert driver not in container_names("spark-worker")
    assert "Finished task" in logs

    # The ledger covers exactly the committed records; sessions are exactly what the records make.
    ledger = psql(
        "SELECT count(*), sum(records_read), sum(accepted), sum(duplicates), sum(quarantined) FROM ledger_batches "
        f"WHERE pipeline = 'ingest:{topic}'"
    ).stdout.strip()
    batches, read, accepted, duplicates, quarantined = map(int, ledger.split("|"))
    assert batches >= 1 and read == committed == accepted + duplicates + quarantined
    assert duplicates == committed - len({v["event_id"] for *_, v in read_topic(stack, topic, committed)}) > 0
    assert quarantined == 0
    covered = psql(f"SELECT sum(end_offset - start_offset) FROM ledger_ranges WHERE topic = '{topic}'").stdout
    assert int(covered) == committed
    rows = psql(
        "SELECT entity_id, " + ", ".join(f"(extract(epoch FROM {c}) * 1000)::bigint" for c in
        ("started_at", "ended_at", "first_event_time", "last_event_time")) + ", event_count FROM sessions"
    ).stdout.split()  # fmt: skip
    sessions = {(r[0], *map(int, r[1:])) for r in (row.split("|") for row in rows)}
    assert sessions == expected_sessions(read_topic(stack, topic, committed))
    assert len(sessions) == ENTITIES and sum(s[-1] for s in sessions) == accepted

    # Reconcile (PostgreSQL against Delta, the ledger's ranges against Kafka) passes.
    # The ingest run's asset event also schedules one as soon as the DAG is unpaused: whichever runs
    # first checks the new batches with Spark, a later one finds nothing new and checks without it.
    run = stack.run_dag("tidemark_reconcile", timeout=900)
    assert run["state"] == "success", stack.task_states("tidemark_reconcile", run["dag_run_id"])

    def all_ended() -> list[dict] | None:
        runs = stack.airflow("GET", "/dags/tidemark_reconcile/dagRuns")["dag_runs"]
        return runs if all(r["state"] in ("success", "failed") for r in runs) else None

    runs = wait_for(all_ended, 900, "every tidemark_reconcile run to end")
    assert {r["dag_run_id"]: r["state"] for r in runs} == {r["dag_run_id"]: "success" for r in runs}
    tasks = [stack.task_states("tidemark_reconcile", r["dag_run_id"]) for r in runs]
    assert any(t["reconcile"] == "success" for t in tasks), tasks  # the Spark path ran once at least
    statuses = psql("SELECT run_id, status FROM reconcile_runs").stdout.split()
    assert dict(row.split("|") for row in statuses) == {r["dag_run_id"]: "ok" for r in runs}
    [app] = [a for a in stack.spark_master()["completedapps"] if a["name"] == "tidemark-reconcile"]
    assert app["state"] == "FINISHED", app


def registry(stack: Stack, path: str, body: dict | None = None) -> dict | list:
    """The schema registry's Confluent-compatible API on its published port."""
    url = f"http://127.0.0.1:{stack.env['SCHEMA_REGISTRY_HOST_PORT']}/apis/ccompat/v7{path}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method="POST" if body else "GET")
    request.add_header("Content-Type", "application/vnd.schemaregistry.v1+json")
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)


def test_an_avro_pipeline_reads_through_the_stacks_schema_registry(stack: Stack) -> None:
    assert registry(stack, "/config") == {"compatibilityLevel": "BACKWARD"}
    compose("cp", str(SCHEMA), "airflow-scheduler:/tmp/orders.avsc")
    produced = exec_in(
        "airflow-scheduler", "tidemark", "produce", "--pipeline", "orders", "--schema", "/tmp/orders.avsc",
        "--count", str(AVRO_EVENTS), "--entities", "20", "--malformed-rate", "0.06", "--seed", "11",
    ).stdout  # fmt: skip
    match = re.search(r"produced ([\d,]+) committed records to (\S+) in [\d.]+ s \((.*)\)", produced)
    assert match and match[2] == "shop.orders", produced
    kinds = {kind: int(n.replace(",", "")) for kind, n in (part.rsplit(" ", 1) for part in match[3].split(", "))}
    reasons = ("not_avro", "unknown_schema", "bad_avro")
    unreadable = {kind.removeprefix("malformed:"): n for kind, n in kinds.items() if kind.startswith("malformed:")}
    assert set(unreadable) == set(reasons), produced
    # The registry stores in PostgreSQL: the version `produce` registered is a row of its own database.
    versions = psql("SELECT count(*) FROM versions", database="schema_registry").stdout.strip()
    assert int(versions) >= 1
    # BACKWARD: a version whose new field has no default cannot read the older records, and is refused.
    v1 = json.loads(SCHEMA.read_text())
    breaking = {**v1, "fields": [*v1["fields"], {"name": "channel", "type": "string"}]}
    with pytest.raises(urllib.error.HTTPError) as refused:
        registry(stack, "/subjects/shop.orders-value/versions", {"schema": json.dumps(breaking)})
    assert refused.value.code == 409

    dag_id = PipelineNames("orders").dag_id("ingest")
    run = stack.run_dag(dag_id, timeout=1200)
    assert run["state"] == "success", stack.task_states(dag_id, run["dag_run_id"])
    ledger = psql(
        "SELECT sum(records_read), sum(accepted), sum(duplicates), sum(quarantined) FROM orders.ledger_batches"
    )
    read, accepted, duplicates, quarantined = map(int, ledger.stdout.strip().split("|"))
    assert read == AVRO_EVENTS == accepted + duplicates + quarantined and accepted > 0
    reasons = psql(
        "SELECT split_part(reason, ':', 1), sum(records) FROM orders.quarantine_reasons GROUP BY 1"
    ).stdout.split()
    assert dict(row.split("|") for row in reasons) == {kind: str(n) for kind, n in unreadable.items()}


def test_the_pipeline_role_cannot_change_the_schema(stack: Stack) -> None:
    password = stack.env["TIDEMARK_PIPELINE_PASSWORD"]
    assert psql("SELECT count(*) FROM sessions", "tidemark_pipeline", password).returncode == 0
    create = psql("CREATE TABLE sneaky (id int)", "tidemark_pipeline", password, check=False)
    assert create.returncode != 0 and "permission denied for schema public" in create.stderr
    insert = psql(
        "INSERT INTO schema_migrations (version, name, checksum) VALUES (9999, 'x', 'y')",
        "tidemark_pipeline",
        password,
        check=False,
    )
    assert insert.returncode != 0 and "permission denied for table schema_migrations" in insert.stderr
    # The same in the second pipeline's schema (test_a_second_pipeline_...): each schema has its own
    # schema_migrations, and the pipeline role only reads it.
    create = psql("CREATE TABLE web.sneaky (id int)", "tidemark_pipeline", password, check=False)
    assert create.returncode != 0 and "permission denied for schema web" in create.stderr
    grants = psql(
        "SELECT table_schema, string_agg(privilege_type, ',' ORDER BY privilege_type) "
        "FROM information_schema.table_privileges WHERE grantee = 'tidemark_pipeline' "
        "AND table_name = 'schema_migrations' GROUP BY table_schema"
    ).stdout.split()
    assert dict(row.split("|") for row in grants) == {"public": "SELECT", "web": "SELECT", "orders": "SELECT"}


def test_down_leaves_nothing_of_the_project(stack: Stack) -> None:
    compose("down", "-v", "--remove-orphans", "--timeout", "30")
    assert leftovers() == {"containers": [], "volumes": [], "networks": []}
