"""The embedded stack: `up` is idempotent, a taken port is a clear error, migrations re-run cleanly."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from spark_jobs.settings import Settings
from tidemark.embedded import KafkaBroker, PostgresServer, ServiceError
from tidemark.migrations import SQL_DIR, MigrationError, migrate


def test_up_twice_is_harmless(stack: Settings) -> None:
    kafka, postgres = KafkaBroker(stack), PostgresServer(stack)
    pids = (kafka.pid(), postgres.pid())
    assert "already running" in postgres.start()
    assert "already running" in kafka.start()
    assert (kafka.pid(), postgres.pid()) == pids
    assert kafka.is_running() and postgres.is_running()


@pytest.fixture
def taken_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_taken_kafka_port_is_a_clear_error(tmp_path: Path, taken_port: int, stack: Settings) -> None:
    settings = Settings.from_env(
        {
            "TIDEMARK_HOME": str(tmp_path),
            "TIDEMARK_KAFKA_PORT": str(taken_port),
            "TIDEMARK_JARS_DIR": str(stack.jars_dir),
        }
    )
    with pytest.raises(ServiceError, match=f"port {taken_port} is already in use.*TIDEMARK_KAFKA_PORT"):
        KafkaBroker(settings).start()
    assert not (tmp_path / "kafka" / "kafka.pid").exists()


def test_cli_up_on_a_taken_postgres_port_exits_2_and_says_what_to_do(tmp_path: Path, taken_port: int) -> None:
    env = {**os.environ, "TIDEMARK_HOME": str(tmp_path), "TIDEMARK_POSTGRES_PORT": str(taken_port)}
    tidemark = str(Path(sys.executable).parent / "tidemark")
    result = subprocess.run([tidemark, "up"], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert f"port {taken_port} is already in use" in result.stderr
    assert "TIDEMARK_POSTGRES_PORT=<port>" in result.stderr


def _scratch_database(stack: Settings, name: str, options: str = "") -> str:
    from spark_jobs import db

    with db.session(PostgresServer(stack).superuser_dsn()) as conn, conn.cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{name}"')
        cur.execute(f'CREATE DATABASE "{name}" OWNER tidemark {options}')
    return f"host=127.0.0.1 port={stack.postgres_port} dbname={name} user=tidemark"


def test_a_database_that_is_not_utf8_is_refused_before_any_migration(stack: Settings) -> None:
    """Entity ids are any UTF-8 text: in a SQL_ASCII or LATIN1 database a non-Latin id fails the
    batch's COPY on every retry (a poison pill for every entity of the batch). Refused up front."""
    from spark_jobs import db

    latin1 = "ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0"
    dsn = _scratch_database(stack, "tidemark_latin1_test", latin1)
    with pytest.raises(MigrationError, match=r"tidemark_latin1_test is encoded LATIN1.*ENCODING 'UTF8'"):
        migrate(dsn)
    with db.transaction(dsn) as cur:
        cur.execute("SELECT to_regclass('schema_migrations') IS NULL")
        assert db.fetch_one(cur)[0], "nothing was created"


def test_migrations_apply_once_and_re_run_cleanly(stack: Settings) -> None:
    import psycopg2

    dsn = _scratch_database(stack, "tidemark_migrations_test")
    first = migrate(dsn)
    assert first == [p.name for p in sorted(SQL_DIR.glob("*.sql"))]
    assert migrate(dsn) == []
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute("SELECT name FROM schema_migrations ORDER BY version")
        assert [row[0] for row in cur.fetchall()] == first
        cur.execute("SELECT to_regclass('ledger_batches') IS NOT NULL")
        assert cur.fetchone() == (True,)


def test_a_migration_edited_after_it_was_applied_is_refused(stack: Settings, tmp_path: Path) -> None:
    dsn = _scratch_database(stack, "tidemark_migrations_edit_test")
    (tmp_path / "0001_things.sql").write_text("CREATE TABLE things (id int);")
    assert migrate(dsn, tmp_path) == ["0001_things.sql"]
    (tmp_path / "0001_things.sql").write_text("CREATE TABLE things (id bigint);")
    with pytest.raises(MigrationError, match="0001_things.sql was changed after it was applied"):
        migrate(dsn, tmp_path)
