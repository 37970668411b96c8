"""tidemark's configuration: one typed object, built once from the environment and arguments.

Nothing reads the environment at import time; entry points call :meth:`Settings.from_env` and pass
the result down. Every value has an environment variable so the same code runs on the embedded
default and on a cluster (see README, "Configuration").
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path

from spark_jobs.contract import SessionRules
from spark_jobs.errors import ConfigError

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def _default_home() -> Path:
    # An editable install (what `make` does) keeps state next to the checkout; anything else uses
    # the working directory.
    root = PROJECT_ROOT if (PROJECT_ROOT / "pyproject.toml").exists() else Path.cwd()
    return root / ".tidemark"


def _port(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        port = int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a port number; set it to an integer 1-65535") from None
    if not 0 < port < 65536:
        raise ConfigError(f"{name}={port} is out of range; set it to an integer 1-65535")
    return port


def _number(env: Mapping[str, str], name: str, default: float, kind: type = float) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = kind(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a number; set it to a positive {kind.__name__}") from None
    if value <= 0:
        raise ConfigError(f"{name}={raw!r} must be positive")
    return value


def _horizon(env: Mapping[str, str]) -> float:
    """``TIDEMARK_DEDUPE_HORIZON_DAYS``: positive days, or ``unbounded`` (also 0); default 30."""
    raw = (env.get("TIDEMARK_DEDUPE_HORIZON_DAYS") or "").strip()
    if not raw:
        return 30.0
    if raw.lower() == "unbounded":
        return 0.0
    try:
        days = float(raw)
    except ValueError:
        days = -1.0
    if not days >= 0 or days == float("inf"):
        raise ConfigError(
            f"TIDEMARK_DEDUPE_HORIZON_DAYS={raw!r}: set a number of days (e.g. 30), or unbounded to compare with "
            "every stored copy"
        )
    return days


def _count(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    if not raw.strip().isdigit():
        raise ConfigError(f"{name}={raw!r} must be a whole number, 0 or more")
    return int(raw)


def _rules(env: Mapping[str, str]) -> SessionRules:
    gap = _number(env, "TIDEMARK_SESSION_GAP_MINUTES", SessionRules().gap.total_seconds() / 60)
    longest = _number(env, "TIDEMARK_SESSION_MAX_HOURS", SessionRules().max_length.total_seconds() / 3600)
    try:
        return SessionRules(gap=timedelta(minutes=gap), max_length=timedelta(hours=longest))
    except ValueError as exc:
        raise ConfigError(f"TIDEMARK_SESSION_GAP_MINUTES / TIDEMARK_SESSION_MAX_HOURS: {exc}") from None


def _minutes(delta: timedelta) -> str:
    return f"{delta.total_seconds() / 60:g}"


@dataclass(frozen=True)
class Settings:
    """Where tidemark's services, data and jars are, and how to reach them."""

    home: Path
    kafka_port: int = 19092
    kafka_controller_port: int = 19093
    postgres_port: int = 15432
    topic: str = "events"
    bootstrap_servers: str = ""
    postgres_dsn: str = ""
    lake_root: str = ""
    checkpoint_root: str = ""
    jars_dir: Path = field(default=Path())
    # Extra Kafka client options (SASL/SSL, ...) passed through to every client, without the
    # "kafka." prefix Spark uses.
    kafka_options: Mapping[str, str] = field(default_factory=dict)
    # How sessions are cut; the ledger records them and a run with other rules is refused.
    session_rules: SessionRules = field(default_factory=SessionRules)
    # Reconciliation re-checks every verified range at least once per this many days.
    reverify_days: float = 7.0
    # Reconciliation alerts when the oldest record not processed yet arrived longer ago than this.
    lag_alert_minutes: float = 60.0
    # Records per scheduled batch at most (Spark's maxOffsetsPerTrigger); 0: no cap. Sized so one
    # batch finishes on the embedded machine (2 cores, a 2 GiB driver) well inside the task timeout.
    max_offsets_per_trigger: int = 500_000
    # Kafka records per Spark read task at most (the Kafka source's maxRecordsPerPartition); 0: one
    # task per Kafka partition. Parsing is a batch's heaviest scan, and a few large partitions on a
    # few cores leave cores idle (3 partitions on 2 cores: the third runs alone after the first two).
    read_task_records: int = 25_000
    # Dedupe horizon: a record is compared with the stored copies of its event_id that arrived at most
    # this many days before the batch's earliest record (0: with every stored copy, unbounded). A copy
    # arriving later than that after the first is accepted as a new event (docs/design.md, "Dedupe").
    dedupe_horizon_days: float = 30.0
    # Maintenance: VACUUM keeps files any version younger than this still needs (Delta's default,
    # and its minimum unless its safety check is off); reconcile history older than this is pruned.
    vacuum_retain_hours: float = 168.0
    history_days: float = 90.0
    # Maintenance compacts files smaller than this into files of up to this size and never rewrites a
    # file of this size: each maintenance rewrites a bounded amount, and old rows are never packed
    # into one file with new ones, so the dedupe lookup skips the files older than its horizon.
    compact_target_mb: float = 128.0
    # The ingest DAG alerts when a run's batches broke the producer requirements more often than this.
    producer_alert_threshold: int = 0
    # The writer lock's connection runs a query this often, so idle timeouts and poolers keep it.
    writer_heartbeat_seconds: float = 30.0
    # Spark, when tidemark builds the session itself (the CLI, tests); spark-submit's own flags win.
    spark_master: str = "local[2]"
    shuffle_partitions: int = 4
    driver_memory: str = "2g"
    spark_ui: bool = False
    spark_log_level: str = "WARN"

    def __post_init__(self) -> None:
        # Derived defaults: fill what was left empty from home and the ports.
        home = self.home.resolve()
        object.__setattr__(self, "home", home)
        if not self.bootstrap_servers:
            object.__setattr__(self, "bootstrap_servers", f"127.0.0.1:{self.kafka_port}")
        if not self.postgres_dsn:
            dsn = f"host=127.0.0.1 port={self.postgres_port} dbname=tidemark user=tidemark"
            object.__setattr__(self, "postgres_dsn", dsn)
        if not self.lake_root:
            object.__setattr__(self, "lake_root", str(home / "lake"))
        if not self.checkpoint_root:
            object.__setattr__(self, "checkpoint_root", str(home / "checkpoints"))
        if self.jars_dir == Path():
            object.__setattr__(self, "jars_dir", home / "jars")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: object) -> Settings:
        """Build settings from ``TIDEMARK_*`` variables; keyword overrides win over both."""
        env = os.environ if env is None else env
        kafka_options = {
            key[len("TIDEMARK_KAFKA_OPT_") :].lower().replace("_", "."): value
            for key, value in env.items()
            if key.startswith("TIDEMARK_KAFKA_OPT_")
        }
        settings = cls(
            home=Path(env.get("TIDEMARK_HOME") or _default_home()),
            kafka_port=_port(env, "TIDEMARK_KAFKA_PORT", 19092),
            kafka_controller_port=_port(env, "TIDEMARK_KAFKA_CONTROLLER_PORT", 19093),
            postgres_port=_port(env, "TIDEMARK_POSTGRES_PORT", 15432),
            topic=env.get("TIDEMARK_TOPIC") or "events",
            bootstrap_servers=env.get("TIDEMARK_KAFKA_BOOTSTRAP_SERVERS", ""),
            postgres_dsn=env.get("TIDEMARK_POSTGRES_DSN", ""),
            lake_root=env.get("TIDEMARK_LAKE_ROOT", ""),
            checkpoint_root=env.get("TIDEMARK_CHECKPOINT_ROOT", ""),
            jars_dir=Path(env.get("TIDEMARK_JARS_DIR") or Path()),
            kafka_options=kafka_options,
            session_rules=_rules(env),
            reverify_days=_number(env, "TIDEMARK_REVERIFY_DAYS", 7.0),
            lag_alert_minutes=_number(env, "TIDEMARK_LAG_ALERT_MINUTES", 60.0),
            writer_heartbeat_seconds=_number(env, "TIDEMARK_WRITER_HEARTBEAT_SECONDS", 30.0),
            producer_alert_threshold=_count(env, "TIDEMARK_PRODUCER_ALERT_THRESHOLD", 0),
            max_offsets_per_trigger=_count(env, "TIDEMARK_MAX_OFFSETS_PER_TRIGGER", 500_000),
            read_task_records=_count(env, "TIDEMARK_READ_TASK_RECORDS", 25_000),
            dedupe_horizon_days=_horizon(env),
            vacuum_retain_hours=_number(env, "TIDEMARK_VACUUM_RETAIN_HOURS", 168.0),
            history_days=_number(env, "TIDEMARK_HISTORY_DAYS", 90.0),
            compact_target_mb=_number(env, "TIDEMARK_COMPACT_TARGET_MB", 128.0),
            spark_master=env.get("TIDEMARK_SPARK_MASTER") or "local[2]",
            shuffle_partitions=int(_number(env, "TIDEMARK_SHUFFLE_PARTITIONS", 4, int)),
            driver_memory=env.get("TIDEMARK_SPARK_DRIVER_MEMORY") or "2g",
            spark_ui=(env.get("TIDEMARK_SPARK_UI") or "false").lower() == "true",
            spark_log_level=env.get("TIDEMARK_SPARK_LOG_LEVEL") or "WARN",
        )
        return replace(settings, **overrides) if overrides else settings

    def to_env(self) -> dict[str, str]:
        """The ``TIDEMARK_*`` variables that rebuild these settings in another process.

        ``Settings.from_env(s.to_env()) == s``: spark-submit, Airflow tasks and test subprocesses
        get their configuration this one way.
        """
        env = {
            "TIDEMARK_HOME": str(self.home),
            "TIDEMARK_KAFKA_PORT": str(self.kafka_port),
            "TIDEMARK_KAFKA_CONTROLLER_PORT": str(self.kafka_controller_port),
            "TIDEMARK_POSTGRES_PORT": str(self.postgres_port),
            "TIDEMARK_TOPIC": self.topic,
            "TIDEMARK_KAFKA_BOOTSTRAP_SERVERS": self.bootstrap_servers,
            "TIDEMARK_POSTGRES_DSN": self.postgres_dsn,
            "TIDEMARK_LAKE_ROOT": self.lake_root,
            "TIDEMARK_CHECKPOINT_ROOT": self.checkpoint_root,
            "TIDEMARK_JARS_DIR": str(self.jars_dir),
            "TIDEMARK_SESSION_GAP_MINUTES": _minutes(self.session_rules.gap),
            "TIDEMARK_SESSION_MAX_HOURS": f"{self.session_rules.max_length.total_seconds() / 3600:g}",
            "TIDEMARK_REVERIFY_DAYS": f"{self.reverify_days:g}",
            "TIDEMARK_LAG_ALERT_MINUTES": f"{self.lag_alert_minutes:g}",
            "TIDEMARK_WRITER_HEARTBEAT_SECONDS": f"{self.writer_heartbeat_seconds:g}",
            "TIDEMARK_PRODUCER_ALERT_THRESHOLD": str(self.producer_alert_threshold),
            "TIDEMARK_MAX_OFFSETS_PER_TRIGGER": str(self.max_offsets_per_trigger),
            "TIDEMARK_READ_TASK_RECORDS": str(self.read_task_records),
            "TIDEMARK_DEDUPE_HORIZON_DAYS": f"{self.dedupe_horizon_days:g}",
            "TIDEMARK_VACUUM_RETAIN_HOURS": f"{self.vacuum_retain_hours:g}",
            "TIDEMARK_HISTORY_DAYS": f"{self.history_days:g}",
            "TIDEMARK_COMPACT_TARGET_MB": f"{self.compact_target_mb:g}",
            "TIDEMARK_SPARK_MASTER": self.spark_master,
            "TIDEMARK_SHUFFLE_PARTITIONS": str(self.shuffle_partitions),
            "TIDEMARK_SPARK_DRIVER_MEMORY": self.driver_memory,
            "TIDEMARK_SPARK_UI": str(self.spark_ui).lower(),
            "TIDEMARK_SPARK_LOG_LEVEL": self.spark_log_level,
        }
        for key, value in self.kafka_options.items():
            env["TIDEMARK_KAFKA_OPT_" + key.upper().replace(".", "_")] = str(value)
        return env

    @property
    def compact_target_bytes(self) -> int:
        """The compaction target (``compact_target_mb``) in bytes, as Delta's OPTIMIZE takes it."""
        return round(self.compact_target_mb * 1024 * 1024)

    @property
    def dedupe_horizon_us(self) -> int | None:
        """The dedupe horizon in microseconds, None when unbounded."""
        return round(self.dedupe_horizon_days * 86_400_000_000) if self.dedupe_horizon_days > 0 else None

    @property
    def logs_dir(self) -> Path:
        return self.home / "logs"

    @property
    def kafka_dir(self) -> Path:
        return self.home / "kafka"

    @property
    def postgres_dir(self) -> Path:
        return self.home / "postgres"

    def table_path(self, name: str) -> str:
        """Location of the Delta table ``name`` under the lake root (a path or an object-store URI)."""
        return f"{self.lake_root.rstrip('/')}/{name}"

    def secrets(self) -> list[str]:
        """The secret values these settings carry (for :func:`spark_jobs.secrets.redact`)."""
        from spark_jobs.secrets import dsn_password, option_secrets

        return [s for s in (dsn_password(self.postgres_dsn), *option_secrets(self.kafka_options)) if s]

    def kafka_client_config(self, **extra: object) -> dict[str, object]:
        """confluent-kafka configuration for this cluster, pass-through options included."""
        from spark_jobs.kafka_clients import librdkafka_options

        return {"bootstrap.servers": self.bootstrap_servers, **librdkafka_options(self.kafka_options), **extra}
