"""Shared fixtures.

Integration tests run against real services on their own ports and state folder
(``.tidemark/test``), so they never touch a demo stack. The session starts what is not running and
stops, at the end, only what it started. One SparkSession serves the whole session.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from spark_jobs.settings import PROJECT_ROOT, Settings

INTEGRATION_DIR = Path(__file__).parent / "integration"
VENV_BIN = Path(sys.executable).parent
FEW_RECORDS = 10_000  # more than any one run of the tests reads
INTERPRETED_PROJECTIONS = "spark.sql.codegen.factoryMode"  # Spark's, internal: CODEGEN_ONLY, NO_CODEGEN, FALLBACK

# Airflow reads its configuration when first imported: point it at this project's DAGs and plugins
# and at a metadata database of the tests' own (SQLite, created by the `airflow_db` fixture).
os.environ.setdefault("AIRFLOW_HOME", str(PROJECT_ROOT / ".tidemark" / "test" / "airflow"))
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(PROJECT_ROOT / "dags")
os.environ["AIRFLOW__CORE__PLUGINS_FOLDER"] = str(PROJECT_ROOT / "plugins")
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
# SparkSubmitOperator runs `spark-submit` from PATH: the venv's.
os.environ["PATH"] = f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"


def pytest_unconfigure(config: pytest.Config) -> None:
    # py4j closes its connections to the JVM while Python shuts down and logs that at INFO, after
    # pytest has closed the streams the tests' log handlers wrote to: "--- Logging error ---" and a
    # traceback after the summary of every run that started Spark.
    logging.getLogger("py4j").setLevel(logging.WARNING)


# Each test's seconds (set-up, call and tear-down): appended, a line per test, to the file
# TIDEMARK_TEST_TIMES names when the session ends (CI's runs keep them, to balance its lanes by).
TEST_SECONDS: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    TEST_SECONDS[report.nodeid] = TEST_SECONDS.get(report.nodeid, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = os.environ.get("TIDEMARK_TEST_TIMES")
    if path and TEST_SECONDS:
        suite = session.config.option.markexpr or "-"
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as times:  # one write: two lanes' sessions append to one file
            times.write("".join(f"{seconds:.1f}\t{suite}\t{test}\n" for test, seconds in TEST_SECONDS.items()))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if INTEGRATION_DIR in Path(item.fspath).parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def settings() -> Settings:
    env = {
        "TIDEMARK_HOME": os.environ.get("TIDEMARK_TEST_HOME", str(PROJECT_ROOT / ".tidemark" / "test")),
        "TIDEMARK_KAFKA_PORT": os.environ.get("TIDEMARK_TEST_KAFKA_PORT", "29092"),
        "TIDEMARK_KAFKA_CONTROLLER_PORT": os.environ.get("TIDEMARK_TEST_KAFKA_CONTROLLER_PORT", "29093"),
        "TIDEMARK_POSTGRES_PORT": os.environ.get("TIDEMARK_TEST_POSTGRES_PORT", "25432"),
        "TIDEMARK_SCHEMA_REGISTRY_PORT": os.environ.get("TIDEMARK_TEST_SCHEMA_REGISTRY_PORT", "28081"),
        "TIDEMARK_JARS_DIR": str(PROJECT_ROOT / ".tidemark" / "jars"),
        "TIDEMARK_SHUFFLE_PARTITIONS": "2",
    }
    return Settings.from_env(env)


@pytest.fixture(scope="session")
def stack(settings: Settings):
    """Kafka and PostgreSQL running, database migrated."""
    from tidemark.embedded import KafkaBroker, PostgresServer
    from tidemark.migrations import migrate

    services: list[PostgresServer | KafkaBroker] = [PostgresServer(settings), KafkaBroker(settings)]
    started = [service for service in services if not service.is_running()]
    try:
        for service in services:
            service.start()
        migrate(settings.postgres_dsn)
        yield settings
    finally:
        for service in reversed(started):
            service.stop()


@pytest.fixture(scope="session")
def registry(settings: Settings):
    """The local schema registry (Apicurio) running, for the Avro pipelines' tests; stopped after them
    when this session started it."""
    from tidemark.embedded.schema_registry import SchemaRegistry

    service = SchemaRegistry(settings)
    started = not service.is_running()
    service.start()
    try:
        yield service
    finally:
        if started:
            service.stop()


@pytest.fixture(scope="session")
def spark_session(settings: Settings):
    """The one SparkSession of the test session (local, Delta enabled); needs no other service."""
    from spark_jobs.spark import build_session

    # Its runs read a few thousand records at most: its JVM starts as a small run's does, with HotSpot's
    # quick compiler alone. With both compilers, C2 took two fifths of this JVM's CPU over the tests (one
    # module's tests run both ways beside each other: a fifth less CPU in this JVM, a test more in the same time).
    session = build_session(settings, "tidemark-tests", records=FEW_RECORDS)
    # Spark builds an expression's code for each task that projects rows outside a whole-stage plan: for
    # Delta's log (its actions' schema, hundreds of nested fields) a fifth of this JVM's CPU went to writing
    # that code for tables of a few files. The tests' tables are that small: their projections are
    # interpreted (Spark's own fallback path; the results are the same). On two lanes at once, the same
    # twelve tests took a fifth to a quarter less CPU (280-302 CPU-s against 361-370; docs/reference.md).
    session.conf.set(INTERPRETED_PROJECTIONS, "NO_CODEGEN")
    yield session
    session.stop()


@pytest.fixture(autouse=True)
def delta_tables_forgotten(request: pytest.FixtureRequest):
    """After each test that used Spark, the session's JVM forgets the Delta tables it read (every test
    writes tables of its own). Kept, they grew the driver's live heap by about 13 MB a minute towards
    its 2 GB (800 MB half an hour into CI's lanes), and its collector took a fifth to a third of its CPU."""
    yield
    if "spark_session" in request.fixturenames:
        from spark_jobs.jvm import forget_delta_tables

        forget_delta_tables(request.getfixturevalue("spark_session"))


@pytest.fixture(scope="session")
def spark(stack: Settings, spark_session):
    """The SparkSession, with Kafka and PostgreSQL running."""
    return spark_session


@pytest.fixture
def topic(stack: Settings) -> str:
    """A fresh topic name per test (created by the producer)."""
    return f"test-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def pg(stack: Settings):
    """A psycopg2 connection to the tidemark database, closed after the test."""
    from spark_jobs.db import connect

    conn = connect(stack.postgres_dsn)
    yield conn
    conn.close()


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """Airflow's metadata database for the tests (SQLite under .tidemark/test/airflow), migrated."""
    home = Path(os.environ["AIRFLOW_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    subprocess.run([str(VENV_BIN / "airflow"), "db", "migrate"], check=True, capture_output=True, timeout=300)
    return home


@pytest.fixture
def database(stack: Settings):
    """A fresh, migrated PostgreSQL database for one test; yields settings pointing at it."""
    from dataclasses import replace

    from spark_jobs import db
    from tidemark.migrations import migrate

    name = f"tidemark_{uuid.uuid4().hex[:10]}"
    admin_dsn = stack.postgres_dsn.replace("user=tidemark", "user=postgres")  # the embedded superuser
    with db.session(admin_dsn) as admin, admin.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{name}" OWNER tidemark')
    dsn = stack.postgres_dsn.replace("dbname=tidemark", f"dbname={name}")
    migrate(dsn)
    try:
        yield replace(stack, postgres_dsn=dsn)
    finally:
        with db.session(admin_dsn) as admin, admin.cursor() as cur:
            cur.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
