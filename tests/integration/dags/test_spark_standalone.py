"""The ingest DAG on a Spark standalone cluster: the cluster path through SparkSubmitOperator.

A standalone master (``spark://127.0.0.1:7077``) and one worker are started from the pyspark
distribution in the venv (``bin/spark-class``), on loopback, with their work and log folders in the
test's temporary folder. Only the ``spark_default`` connection changes (and ``SPARK_LOCAL_IP``, so
the driver advertises loopback too); the DAG, the operator and the job are the ones
``local[2]`` runs. The test then checks the sinks, and that the work really ran on the cluster:
the master lists the finished application, and the worker's executor fetched the connector and
Delta jars from the driver and ran tasks.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

import pyspark
import pytest

from spark_jobs.settings import Settings
from spark_jobs.spark import REQUIRED_JARS
from tests.integration.dags.test_airflow_dags import airflow_connections, load_dag, query, state, task_states
from tests.ports import free_port
from tidemark.producer import ProduceSpec, produce

# The distributed shape: `make test-deploy`, not `make test`.
pytestmark = pytest.mark.deploy

T = TypeVar("T")
MASTER_PORT = 7077
HOST = "127.0.0.1"
APP_NAME = "tidemark-ingest"  # the operator's spark-submit --name (TidemarkSparkSubmitOperator: tidemark-<job>)


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex((HOST, port)) == 0


def tail(path: Path, lines: int = 40) -> str:
    text = path.read_text(errors="replace") if path.exists() else ""
    return "\n".join(text.splitlines()[-lines:])


@dataclass(frozen=True)
class Cluster:
    url: str
    webui: str  # the master's web UI, whose /json/ describes workers and applications
    work_dir: Path  # the worker's: one app-* folder per application, with each executor's stdout/stderr
    master_log: Path
    worker_log: Path

    def state(self) -> dict:
        with urllib.request.urlopen(f"{self.webui}/json/", timeout=5) as response:
            return json.load(response)


def wait_for(condition: Callable[[], T | None], timeout: float, what: str, *logs: Path) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            result = condition()
        except OSError:  # the web UI is not up yet
            result = None
        if result:
            return result
        time.sleep(1)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}\n" + "\n".join(tail(log) for log in logs))


def argv_name(process: subprocess.Popen) -> str:
    argv = [str(a) for a in process.args] if isinstance(process.args, list) else [str(process.args)]
    return next((a for a in argv if a.startswith("org.apache.spark.")), str(process.args))


def stop(process: subprocess.Popen) -> None:
    """SIGTERM the daemon, SIGKILL it if it does not go, then whatever it left in its process group."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)
    # Executors a worker launched live in its process group (its own session: start_new_session).
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory):
    """A standalone master on 127.0.0.1:7077 and one worker (1 core, 1 GiB), stopped by PID afterwards."""
    if port_open(MASTER_PORT):
        pytest.fail(f"port {MASTER_PORT} is taken: stop whatever listens there (a Spark master?) and re-run")
    root = tmp_path_factory.mktemp("spark-standalone")
    spark_home = Path(pyspark.__file__).parent
    for name in ("conf", "logs", "work", "local"):
        (root / name).mkdir()
    env = os.environ | {
        "SPARK_HOME": str(spark_home),
        "SPARK_CONF_DIR": str(root / "conf"),  # empty: no spark-defaults or log4j files from elsewhere
        "SPARK_LOG_DIR": str(root / "logs"),
        "SPARK_WORKER_DIR": str(root / "work"),
        "SPARK_LOCAL_DIRS": str(root / "local"),
        "SPARK_LOCAL_IP": HOST,
        "SPARK_LOCAL_HOSTNAME": HOST,
        "SPARK_DAEMON_MEMORY": "512m",
        # No REST submission server (it would take port 6066): client mode does not use it.
        "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
        "PYSPARK_PYTHON": sys.executable,
    }
    spark_class = str(spark_home / "bin" / "spark-class")
    master_ui, worker_ui = free_port(), free_port()
    cluster = Cluster(
        f"spark://{HOST}:{MASTER_PORT}",
        f"http://{HOST}:{master_ui}",
        root / "work",
        root / "master.log",
        root / "worker.log",
    )
    processes: list[subprocess.Popen] = []

    def start(argv: list[str], log: Path) -> subprocess.Popen:
        with log.open("wb") as out:  # spark-class runs the daemon in the foreground, logging to stderr
            process = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        processes.append(process)
        return process

    def alive(process: subprocess.Popen, log: Path) -> None:
        if process.poll() is not None:
            raise AssertionError(f"{argv_name(process)} exited with {process.returncode}:\n{tail(log)}")

    try:
        master = start(
            [spark_class, "org.apache.spark.deploy.master.Master", "--host", HOST, "--port", str(MASTER_PORT),
             "--webui-port", str(master_ui)],
            cluster.master_log,
        )  # fmt: skip

        def master_up() -> bool:
            alive(master, cluster.master_log)
            return cluster.state().get("status") == "ALIVE"

        wait_for(master_up, 90, "the Spark master", cluster.master_log)
        worker = start(
            [spark_class, "org.apache.spark.deploy.worker.Worker", cluster.url, "--host", HOST, "--cores", "1",
             "--memory", "1g", "--webui-port", str(worker_ui), "--work-dir", str(cluster.work_dir)],
            cluster.worker_log,
        )  # fmt: skip

        def worker_registered() -> bool:
            alive(worker, cluster.worker_log)
            return any(w["state"] == "ALIVE" and w["host"] == HOST for w in cluster.state()["workers"])

        wait_for(worker_registered, 90, "the worker to register", cluster.master_log, cluster.worker_log)
        assert "Registering worker" in cluster.master_log.read_text(errors="replace")
        yield cluster
    finally:
        for process in reversed(processes):  # worker (and its executors) first, then the master
            stop(process)


@pytest.mark.timeout(600)
def test_ingest_dag_runs_on_a_standalone_cluster_through_spark_submit(
    spark_cluster: Cluster, database: Settings, topic: str, airflow_db, monkeypatch
) -> None:
    home = database.home / "runs" / f"standalone-{uuid.uuid4().hex[:8]}"
    settings = replace(
        database,
        lake_root=str(home / "lake"),
        checkpoint_root=str(home / "checkpoints"),
        topic=topic,
        shuffle_partitions=2,
    )
    spark_default = {
        "conn_type": "spark",
        "host": f"spark://{HOST}",
        "port": MASTER_PORT,
        "extra": {"deploy-mode": "client"},
    }
    env = (
        settings.to_env()
        | airflow_connections(settings)
        | {
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps(spark_default),
            # The driver runs in spark-submit on this machine (client mode) and executors connect back
            # to it. Keep it on loopback: by default it binds and advertises the first non-loopback
            # address (this host name resolves to 127.0.0.1, which Spark skips), which on a real
            # cluster is what you want. Standard Spark environment, no tidemark setting.
            "SPARK_LOCAL_IP": HOST,
            "SPARK_LOCAL_HOSTNAME": HOST,
        }
    )
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    report = produce(settings, ProduceSpec(count=400, entities=8, duplicate_rate=0.05, malformed_rate=0.02, seed=17))

    run = load_dag("tidemark_ingest").test()
    assert state(run) == "success", task_states(run)

    # The sinks: every committed record of the topic is in the ledger, and sessions in PostgreSQL.
    [(batches, read, accepted, duplicates, quarantined)] = query(
        settings,
        "SELECT count(*), sum(records_read), sum(accepted), sum(duplicates), sum(quarantined) "
        "FROM ledger_batches WHERE pipeline = %s",
        f"ingest:{topic}",
    )
    assert batches >= 1 and read == report.committed == accepted + duplicates + quarantined
    [(covered,)] = query(settings, "SELECT sum(end_offset - start_offset) FROM ledger_ranges WHERE topic = %s", topic)
    assert covered == report.committed
    [(sessions, events)] = query(settings, "SELECT count(*), sum(event_count) FROM sessions")
    assert sessions > 0 and events == accepted

    # The cluster ran it: the master lists the finished application...
    def finished_apps() -> list[dict]:
        return [app for app in spark_cluster.state()["completedapps"] if app["name"] == APP_NAME]

    [app] = wait_for(finished_apps, 60, f"the master to list {APP_NAME} as completed", spark_cluster.master_log)
    assert app["state"] == "FINISHED", app
    assert not spark_cluster.state()["activeapps"]
    # ...and the worker launched its executor, which connected to the driver over loopback, fetched
    # the connector and Delta jars from it (spark.jars, from the operator's --jars), read the topic
    # with its own Kafka consumers and ran the job's tasks.
    app_dir = spark_cluster.work_dir / app["id"]
    executors = sorted(app_dir.glob("*/stderr"))
    assert executors, f"no executor logs under {app_dir}"
    log = "\n".join(path.read_text(errors="replace") for path in executors)
    assert f"Connecting to driver: spark://CoarseGrainedScheduler@{HOST}:" in log
    for prefix in REQUIRED_JARS:
        assert re.search(rf"Fetching spark://{re.escape(HOST)}:\d+/jars/{re.escape(prefix)}", log), prefix
        assert list(app_dir.glob(f"*/{prefix}*.jar")), prefix
    assert re.search(r"client\.id = consumer-spark-kafka-source-\S+-executor", log)
    assert "Finished task" in log
