"""The commands that run the local stack: Kafka and PostgreSQL, and the schema registry when a pipeline reads
Avro (``up``, ``down``, ``status``), the tidemark
database's migrations (``db migrate``) and Airflow in the foreground (``airflow``)."""

from __future__ import annotations

import argparse
import os
import sys
import time

from spark_jobs.errors import ConfigError
from spark_jobs.settings import Settings
from tidemark.embedded import KafkaBroker, PostgresServer, ServiceError, schema_registry
from tidemark.embedded.schema_registry import SchemaRegistry

EXIT_USAGE = 2  # what a user can fix: services stopped, a setting to change


def cmd_up(settings: Settings, args: argparse.Namespace) -> int:
    # Postgres first: it starts in about a second and fails fast on a bad setup.
    postgres = PostgresServer(settings)
    was_running = postgres.is_running()
    print(postgres.start())
    try:
        print(KafkaBroker(settings).start())
    except ServiceError:
        if not was_running:  # a failed start leaves nothing of its own running
            print(postgres.stop())
        raise
    if schema_registry.needed(settings):  # a pipeline reads Avro, and no registry URL is set
        print(SchemaRegistry(settings).start())
    return 0


def dags_banner(settings: Settings) -> list[str]:
    """The DAGs of each pipeline the file declares (loaded paused), and the entries that get none."""
    from spark_jobs.pipeline_names import DAG_KINDS

    try:
        declared = settings.declarations()
    except ConfigError as exc:  # the file as a whole: Airflow shows it as an import error too
        return [f"no DAGs: {line}" for line in str(exc).splitlines()]
    lines = [
        f"DAGs of pipeline {p.name} (paused until you unpause them): {', '.join(p.names.dag_id(k) for k in DAG_KINDS)}"
        for p in declared.pipelines
    ]
    return lines + [f"no DAGs: {line}" for line in declared.lines()]


def cmd_airflow(settings: Settings, args: argparse.Namespace) -> int:
    """Run Airflow with tidemark's DAGs in the foreground until Ctrl-C (or SIGTERM), then stop it all."""
    import signal

    from tidemark.embedded.airflow import AirflowServices

    airflow = AirflowServices(settings, port=args.port, parallelism=args.parallelism)
    print(f"starting Airflow (api-server, scheduler, dag-processor, triggerer) under {airflow.home} ...")
    airflow.start()
    user, password = airflow.login()
    print(
        f"\nAirflow is ready: {airflow.url}\n  log in as {user} / {password}  (stored in {airflow.password_file})\n"
        + "".join(f"  {line}\n" for line in dags_banner(settings))
        + f"  the tidemark page: {airflow.url}/tidemark/; component logs in {airflow.home / 'logs'}\n"
        "  Ctrl-C stops every component.",
        flush=True,
    )

    def interrupt(signum, frame) -> None:  # signal handler signature
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)  # `tidemark down` (`make down`) asks this way
    airflow.foreground_pid_file.write_text(f"{os.getpid()}\n")
    try:
        while all(component in airflow.running() for component in ("api-server", "scheduler")):
            time.sleep(2)
        print("an Airflow component exited; stopping the others (see its log)", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        print(f"stopping Airflow: {', '.join(airflow.stop()) or 'nothing was running'}")
        airflow.foreground_pid_file.unlink(missing_ok=True)


def cmd_down(settings: Settings, args: argparse.Namespace) -> int:
    errors = []
    from tidemark.embedded.airflow import AirflowServices

    stopped = AirflowServices(settings).stop()
    if stopped:
        print(f"Airflow stopped ({', '.join(stopped)})")
    registry = SchemaRegistry(settings)
    services: list[SchemaRegistry | KafkaBroker | PostgresServer] = [KafkaBroker(settings), PostgresServer(settings)]
    for service in ([registry] if registry.pid() is not None else []) + services:
        try:
            print(service.stop())
        except ServiceError as exc:
            errors.append(str(exc))
    for error in errors:
        print(f"error: {error}", file=sys.stderr)
    return 1 if errors else 0


def cmd_status(settings: Settings, args: argparse.Namespace) -> int:
    kafka, postgres, registry = KafkaBroker(settings), PostgresServer(settings), SchemaRegistry(settings)
    states = {
        f"kafka     {settings.bootstrap_servers}": (kafka.is_running(), kafka.pid()),
        f"postgres  127.0.0.1:{settings.postgres_port}": (postgres.is_running(), postgres.pid()),
    }
    if schema_registry.needed(settings) or registry.pid() is not None:
        states[f"registry  127.0.0.1:{settings.schema_registry_port}"] = (registry.is_running(), registry.pid())
    for name, (running, pid) in states.items():
        print(f"{name:40} {'running (pid ' + str(pid) + ')' if running else 'stopped'}")
    print(f"state     {settings.home}")
    return 0 if all(running for running, _ in states.values()) else EXIT_USAGE  # `tidemark up` starts them


def cmd_migrate(settings: Settings, args: argparse.Namespace) -> int:
    from spark_jobs.db import check_reachable
    from tidemark.migrations import migrate_pipelines

    check_reachable(settings.postgres_dsn)  # a clear error if the server is down
    for schema, applied in migrate_pipelines(settings).items():
        print(f"{schema}: applied {', '.join(applied)}" if applied else f"{schema}: up to date")
    return 0
