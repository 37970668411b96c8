"""The bench's own Kafka and PostgreSQL, and the databases and topics one run makes on them.

A service that is not running is started, and stopped again at the end; one that was running is
left running. Every database of a run is copied from one migrated template and named
``bench_<run>_<name>``; the run's databases and topics are removed at the end unless ``--keep``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from spark_jobs.settings import Settings

Progress = Callable[[str], None]


class BenchServices:
    """Kafka and PostgreSQL on the bench's ports, and the databases and topics of run ``run_id``."""

    def __init__(self, settings: Settings, run_id: str) -> None:
        from tidemark.embedded import KafkaBroker, PostgresServer

        self.settings = settings
        self.run_id = run_id
        self.kafka = KafkaBroker(settings)
        self.postgres = PostgresServer(settings)
        self.topics: list[str] = []  # to delete at the end
        self.databases: list[str] = []  # to drop at the end, newest first
        self._started: list = []  # the services this run started, and so stops
        self._template = ""

    def start(self, progress: Progress) -> None:
        """Start what is not running and make the migrated template database."""
        from tidemark.migrations import migrate

        for service in (self.postgres, self.kafka):  # PostgreSQL first: fast, fails fast
            if not service.is_running():
                self._started.append(service)
            progress(service.start())
        template = self.create_database("template")
        migrate(self.dsn(template))
        self._template = template
        progress(f"migrated template database {template}")

    def pids(self) -> list[int]:
        """Process ids of the running services (for CPU accounting)."""
        return [pid for pid in (self.kafka.pid(), self.postgres.pid()) if pid]

    def superuser(self):  # -> psycopg2 connection, autocommit
        import psycopg2

        conn = psycopg2.connect(self.postgres.superuser_dsn())
        conn.autocommit = True
        return conn

    def dsn(self, database: str) -> str:
        return f"host=127.0.0.1 port={self.settings.postgres_port} dbname={database} user=tidemark"

    def create_database(self, name: str, template: str | None = None) -> str:
        """A new database ``bench_<run>_<name>``, copied from ``template`` (default: the migrated one)."""
        import psycopg2

        database = f"bench_{self.run_id}_{name}".replace("-", "_").lower()
        template = template or self._template
        conn = self.superuser()
        try:
            with conn.cursor() as cur:
                for attempt in range(50):
                    try:
                        if template:
                            cur.execute(f'CREATE DATABASE "{database}" TEMPLATE "{template}" OWNER tidemark')
                        else:
                            cur.execute(f'CREATE DATABASE "{database}" OWNER tidemark')
                        break
                    except psycopg2.errors.ObjectInUse:  # the template's last session is still closing
                        if attempt == 49:
                            raise
                        time.sleep(0.1)
        finally:
            conn.close()
        self.databases.append(database)
        return database

    def postgres_version(self) -> str | None:
        """The server's version, None when it is not running or not reachable."""
        if not self.postgres.is_running():
            return None
        import psycopg2

        try:
            conn = self.superuser()
        except psycopg2.Error:
            return None
        try:
            with conn.cursor() as cur:
                cur.execute("SHOW server_version")
                return cur.fetchone()[0]
        finally:
            conn.close()

    def remove_run_data(self, progress: Progress) -> None:
        """Delete the run's topics and drop its databases; a failure is reported, not raised."""
        if self.topics and self.kafka.is_running():
            try:
                delete_topics(self.settings, self.topics)
            except Exception as exc:  # clean-up continues whatever failed
                progress(f"deleting the bench topics failed: {exc}")
        if self.databases and self.postgres.is_running():
            try:
                conn = self.superuser()
                with conn.cursor() as cur:
                    for database in reversed(self.databases):
                        cur.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
                conn.close()
            except Exception as exc:
                progress(f"dropping the bench databases failed: {exc}")

    def stop_started(self, progress: Progress) -> None:
        """Stop the services this run started, in reverse order; a failure is reported, not raised."""
        for service in reversed(self._started):
            try:
                progress(service.stop())
            except Exception as exc:
                progress(f"stopping a service failed: {exc}")


def delete_topics(settings: Settings, topics: list[str]) -> None:
    """Delete ``topics``; one that is already gone is fine."""
    from spark_jobs.offsets import admin_client

    admin = admin_client(settings)  # keep a reference: the futures fail if the client is destroyed
    futures = admin.delete_topics(topics, operation_timeout=30)
    for future in futures.values():
        try:
            future.result(timeout=60)
        except Exception as exc:  # an already missing topic is fine
            if "UNKNOWN_TOPIC" not in str(exc):
                raise
