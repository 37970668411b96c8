"""A single-node Apache Kafka broker in KRaft mode, run from the jars `make jars` fetched."""

from __future__ import annotations

import base64
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

from spark_jobs.settings import Settings
from tidemark.embedded.process import (
    FATAL,
    ServiceError,
    ensure_port_free,
    log_cause,
    log_tail,
    port_open,
    read_pid,
    require_java,
    stop_pid,
    wait_until,
)

HEAP = "-Xmx512m"
SCRAM = "SCRAM-SHA-256"


def new_cluster_id() -> str:
    """A KRaft cluster id (base64url of a UUID) that does not start with '-', which the tool would read
    as an option (Kafka's own Uuid.randomUuid skips those too)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


@dataclass(frozen=True)
class KafkaBroker:
    """The broker of ``settings`` (PLAINTEXT on ``kafka_port``).

    ``sasl_port`` adds a SASL_PLAINTEXT listener with SCRAM-SHA-256 for ``scram_users`` ((name,
    password) pairs, given at run time, never written to a file), as a secured cluster would
    have; the tests authenticate every client against it.
    """

    settings: Settings
    sasl_port: int | None = None
    scram_users: tuple[tuple[str, str], ...] = ()

    @property
    def _dir(self) -> Path:
        return self.settings.kafka_dir

    @property
    def pid_file(self) -> Path:
        return self._dir / "kafka.pid"

    @property
    def log_file(self) -> Path:
        return self.settings.logs_dir / "kafka.log"

    @property
    def jars(self) -> Path:
        return self.settings.jars_dir / "kafka"

    def pid(self) -> int | None:
        return read_pid(self.pid_file)

    def is_running(self) -> bool:
        return self.pid() is not None and port_open(self.settings.kafka_port)

    def start(self, timeout: float = 90.0) -> str:
        """Start the broker unless it runs already; wait until it answers metadata requests."""
        if self.is_running():
            return f"Kafka already running (pid {self.pid()}) on {self.settings.bootstrap_servers}"
        if self.pid() is not None:
            # Started but not listening yet (or hung): give it the same wait as a fresh start.
            self._wait_ready(timeout)
            return f"Kafka running (pid {self.pid()}) on {self.settings.bootstrap_servers}"
        if not any(self.jars.glob("kafka_2.13-*.jar")):
            raise ServiceError(f"Kafka broker jars are missing in {self.jars}. Run `make jars` first.")
        java = require_java()
        ensure_port_free(self.settings.kafka_port, "Kafka", "TIDEMARK_KAFKA_PORT=<port>")
        ensure_port_free(
            self.settings.kafka_controller_port, "Kafka's controller", "TIDEMARK_KAFKA_CONTROLLER_PORT=<port>"
        )

        self._dir.mkdir(parents=True, exist_ok=True)
        self.settings.logs_dir.mkdir(parents=True, exist_ok=True)
        properties = self._write_config()
        log4j = self._write_log4j()
        classpath = f"{self.jars}/*"
        base = [java, HEAP, "-cp", classpath, f"-Dlog4j2.configurationFile={log4j}"]
        if not (self._dir / "data" / "meta.properties").exists():
            scram = [
                arg for name, pw in self.scram_users for arg in ("--add-scram", f"{SCRAM}=[name={name},password={pw}]")
            ]
            formatted = subprocess.run(
                [*base, "kafka.tools.StorageTool", "format", "-t", new_cluster_id(), "-c", str(properties), *scram],
                capture_output=True,
                text=True,
            )
            if formatted.returncode != 0:
                raise ServiceError(f"Kafka's storage format failed: {(formatted.stderr or formatted.stdout).strip()}")
        logged = self.log_file.stat().st_size if self.log_file.exists() else 0  # this start-up's lines follow
        with open(self._dir / "stdout.log", "ab") as out:
            process = subprocess.Popen(
                [*base, "-XX:+UseG1GC", "kafka.Kafka", str(properties)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.pid_file.write_text(f"{process.pid}\n")
        self._wait_ready(timeout, logged)
        return f"Kafka started (pid {process.pid}) on {self.settings.bootstrap_servers}"

    def _wait_ready(self, timeout: float, logged: int | None = None) -> None:
        """Wait until the broker answers. A start-up of this call's (its log from byte ``logged``)
        that fails names the cause its log gives, and stops the broker (it may hang on after a
        failed bind)."""

        def ready() -> bool:
            exited = self.pid() is None  # before the log is read: a broker logs its cause, then exits
            if logged is not None and log_cause(self.log_file, logged, FATAL):
                raise ServiceError("Kafka failed during start-up")
            if exited:
                raise ServiceError("Kafka exited during start-up")
            return port_open(self.settings.kafka_port) and self._answers_metadata()

        try:
            wait_until(ready, timeout, "Kafka", self.log_file)
        except ServiceError as exc:
            if logged is None:
                raise
            self.stop()
            cause = log_cause(self.log_file, logged)
            if cause is None:
                raise ServiceError(f"{exc}.{log_tail(self.log_file)}") from None
            raise ServiceError(f"{str(exc).split(' within')[0]}: {cause} (its log: {self.log_file})") from None

    def _answers_metadata(self) -> bool:
        from confluent_kafka.admin import AdminClient

        # confluent-kafka's stub types AdminClient's configuration without the `logger` object it documents
        # (and Producer and Consumer take): the configuration is the one they get.
        admin = AdminClient(self.settings.kafka_client_config())  # type: ignore[arg-type]
        try:
            admin.list_topics(timeout=2)
        except Exception:  # any failure here means "not ready yet"; we poll again
            return False
        return True

    def stop(self) -> str:
        pid = self.pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return "Kafka is not running"
        stop_pid(pid, timeout=60)
        self.pid_file.unlink(missing_ok=True)
        return f"Kafka stopped (pid {pid})"

    def _write_config(self) -> Path:
        s = self.settings
        config = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{s.kafka_controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{s.kafka_port},CONTROLLER://127.0.0.1:{s.kafka_controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{s.kafka_port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self._dir / "data"),
            # Single node: internal topics cannot be replicated.
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            # An unknown topic must be an error, not silently created (docs/design.md, invariant 7).
            "auto.create.topics.enable": "false",
            # Arrival time is the broker's clock (docs/design.md, "Message contract").
            "log.message.timestamp.type": "LogAppendTime",
            "num.partitions": "3",
            # The controller appends a no-op record to the metadata log every 0.5 s by default: most of
            # an idle broker's CPU (3.0-3.3% of a core; 1.9-2.2% with one every 5 s). One node has no
            # other controller or broker that watches the log for it.
            "metadata.max.idle.interval.ms": "5000",
        }
        if self.sasl_port is not None:
            sasl = f"SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}"
            config["listeners"] += f",{sasl}"
            config["advertised.listeners"] += f",{sasl}"
            config["listener.security.protocol.map"] += ",SASL_PLAINTEXT:SASL_PLAINTEXT"
            config["sasl.enabled.mechanisms"] = SCRAM
            config[f"listener.name.sasl_plaintext.{SCRAM.lower()}.sasl.jaas.config"] = (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            )
        path = self._dir / "server.properties"
        path.write_text("".join(f"{key}={value}\n" for key, value in config.items()))
        return path

    def _write_log4j(self) -> Path:
        path = self._dir / "log4j2.properties"
        path.write_text(
            "rootLogger.level=INFO\n"
            "rootLogger.appenderRef.file.ref=file\n"
            "appender.file.type=File\n"
            "appender.file.name=file\n"
            f"appender.file.fileName={self.log_file}\n"
            "appender.file.layout.type=PatternLayout\n"
            "appender.file.layout.pattern=[%d] %p %m (%c)%n\n"
        )
        return path
