"""``tidemark doctor``: check what tidemark needs (Java, jars, spark-submit, services) and say what to fix."""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from spark_jobs.settings import Settings
from tidemark.embedded import KafkaBroker, PostgresServer, ServiceError, schema_registry
from tidemark.embedded.schema_registry import SchemaRegistry


def run(settings: Settings, args: argparse.Namespace) -> int:
    """Check what tidemark needs and say what to fix."""
    from spark_jobs.spark import spark_jars
    from tidemark.embedded.postgres_server import postgres_bin_dir
    from tidemark.embedded.process import require_java

    checks: list[tuple[str, bool, str]] = []

    def check(name: str, probe) -> None:
        try:
            detail = probe()
            checks.append((name, True, detail or ""))
        except Exception as exc:  # doctor reports every failure instead of stopping
            checks.append((name, False, str(exc)))

    check("java 17+", require_java)
    check("postgres binaries", lambda: str(postgres_bin_dir()))
    check("spark jars", lambda: f"{len(spark_jars(settings))} jars in {settings.jars_dir / 'spark'}")

    def kafka_jars() -> str:
        jars = list((settings.jars_dir / "kafka").glob("kafka_2.13-*.jar"))
        if not jars:
            raise FileNotFoundError(f"no Kafka broker jars in {settings.jars_dir / 'kafka'}; run `make jars`")
        return jars[0].name

    check("kafka broker jars", kafka_jars)

    def spark_submit() -> str:
        # The virtual environment tidemark runs from has its own, whether or not it is on PATH.
        found = shutil.which("spark-submit", path=str(Path(sys.executable).parent)) or shutil.which("spark-submit")
        if found is None:
            raise FileNotFoundError("spark-submit not found: install the project with `make venv`")
        return found

    check("spark-submit", spark_submit)
    check("kafka", service_probe(KafkaBroker(settings), settings.kafka_port))
    check("postgres", service_probe(PostgresServer(settings), settings.postgres_port))
    if schema_registry.needed(settings):  # a pipeline reads Avro from the local registry
        check("java 21+ (registry)", schema_registry.registry_java)
        check("schema registry", registry_probe(settings))
    for name, ok, detail in checks:
        print(f"{'ok  ' if ok else 'FAIL'}  {name:22} {detail}")
    return 0 if all(ok for _, ok, _ in checks) else 2  # each failed check says what to fix


def service_probe(service, port: int) -> Callable[[], str]:  # a KafkaBroker, PostgresServer or SchemaRegistry
    """Whether ``service`` runs on ``port``; otherwise what to do."""
    from tidemark.embedded.process import port_open

    def probe() -> str:
        if service.is_running():
            return f"running on port {port}"
        if port_open(port):
            raise ServiceError(f"port {port} is taken by another process")
        raise ServiceError(f"not running (port {port} free): run `tidemark up`")

    return probe


def registry_probe(settings: Settings) -> Callable[[], str]:
    """The local schema registry's check: unpacked by `make jars`, and running."""
    registry = SchemaRegistry(settings)
    running = service_probe(registry, settings.schema_registry_port)

    def probe() -> str:
        if not registry.app.exists():
            raise FileNotFoundError(f"the schema registry is missing in {registry.app.parent}; run `make jars`")
        return running()

    return probe
