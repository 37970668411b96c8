"""tidemark's configuration: one typed object, built once from the environment and arguments.

Nothing reads the environment at import time; entry points call :meth:`Settings.from_env` and pass
the result down. Every value has an environment variable so the same code runs on the embedded
default and on a cluster. Each setting is declared once, as a :class:`Settings` field made by
:func:`setting` (its parser from ``spark_jobs.settings_parsers``); the declarations drive ``from_env``,
``to_env`` and docs/configuration.md's tables (``spark_jobs.settings_tables``). The settings a pipeline's
options take (``spark_jobs.pipeline_options``) are those a run of it carries (:meth:`Settings.for_pipeline`).
"""

from __future__ import annotations

import logging
import os
import urllib.parse
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spark_jobs.contract import SessionRules
from spark_jobs.errors import ConfigError
from spark_jobs.pipeline_names import DEFAULT_PIPELINE, DEFAULT_TOPIC, PipelineNames
from spark_jobs.pipeline_options import options
from spark_jobs.pipelines import Defaults, Pipeline
from spark_jobs.pipelines_check import PipelinesError
from spark_jobs.pipelines_file import load_each
from spark_jobs.settings_parsers import (
    CAP,
    COUNT,
    FLAG,
    HORIZON,
    NUMBER,
    OPTIONS,
    PATH,
    PORT,
    RULES,
    TEXT,
    WHOLE,
    Parser,
)

if TYPE_CHECKING:
    from spark_jobs.pipelines import Contract
    from spark_jobs.pipelines_check import Declared
    from spark_jobs.schema_registry import SchemaRegistry

PROJECT_ROOT = Path(__file__).resolve().parent.parent
# The options' own defaults (spark_jobs.pipelines.Pipeline): the defaults of the settings they take.
_OPTION = Defaults()


def _checkout() -> Path:
    # An editable install (what `make` does) keeps its state and configuration next to the checkout;
    # anything else uses the working directory.
    return PROJECT_ROOT if (PROJECT_ROOT / "pyproject.toml").exists() else Path.cwd()


def _default_home() -> Path:
    return _checkout() / ".tidemark"


# Home is the one field without a default: code names it (so a test never writes into the checkout
# by accident); the environment falls back to the checkout's.
HOME = Parser(lambda env, names: Path(env.get(names[0]) or _default_home()), PATH.write, code=True)


def setting(env: str | tuple[str, ...], parser: Parser, default: Any = MISSING, doc: str = "", shown: str = "") -> Any:
    """A :class:`Settings` field that ``parser`` reads from ``env`` (a variable, or the ones making one value).

    ``default``: its value when they are unset, or a class or function making one (none: the field is required).
    ``doc``: its README line, after the default as ``parser`` writes it, or as ``shown`` when derived.
    """
    meta = {"env": (env,) if isinstance(env, str) else env, "parser": parser, "doc": doc, "shown": shown}
    return field(default_factory=default, metadata=meta) if callable(default) else field(default=default, metadata=meta)


@dataclass(frozen=True)
class Settings:
    """Where tidemark's services, data and jars are, and how to reach them."""

    # fmt: off
    # A line or two a setting, like the README table made of them (settings_tables).
    home: Path = setting("TIDEMARK_HOME", HOME, doc="data, logs, pid files, jars", shown="`.tidemark/` in the checkout")
    kafka_port: int = setting("TIDEMARK_KAFKA_PORT", PORT, 19092, "the embedded Kafka broker's port")
    kafka_controller_port: int = setting("TIDEMARK_KAFKA_CONTROLLER_PORT", PORT, 19093,
        "the embedded Kafka broker's controller port")
    postgres_port: int = setting("TIDEMARK_POSTGRES_PORT", PORT, 15432, "the embedded PostgreSQL's port")
    schema_registry_port: int = setting("TIDEMARK_SCHEMA_REGISTRY_PORT", PORT, 18081, "the local schema "
        "registry's port (`tidemark up` runs it when a pipeline reads Avro: docs/avro.md)")
    schema_registry_url: str = setting("TIDEMARK_SCHEMA_REGISTRY_URL", TEXT, "", "the Confluent-compatible schema "
        "registry of Avro pipelines; credentials go in this URL (`https://user:password@host`), "
        "never in the pipelines file",
        shown="`http://127.0.0.1:$TIDEMARK_SCHEMA_REGISTRY_PORT/apis/ccompat/v7`")
    # A run works on one pipeline: its Delta tables, PostgreSQL schema, writer lock and contract.
    pipeline: str = setting("TIDEMARK_PIPELINE", TEXT, DEFAULT_PIPELINE, "the pipeline a run works on, and so its "
        "topic (its tables, PostgreSQL schema, writer lock and contract; README, \"Your own pipelines\"); "
        "`--pipeline` wins")
    topic: str = setting("TIDEMARK_TOPIC", TEXT, DEFAULT_TOPIC, "the pipeline `events`' Kafka topic, unless its entry "
        "names one (a run of another pipeline reads that pipeline's own)")
    pipelines_file: Path = setting("TIDEMARK_PIPELINES", PATH, Path(), "the pipelines (README, \"Your own "
        "pipelines\"); `tidemark pipelines check` checks the file", shown="`pipelines.yaml` in the checkout")
    ingest_schedule: str = setting("TIDEMARK_INGEST_SCHEDULE", TEXT, _OPTION.schedule, "the ingest DAGs' cron "
        "(UTC) for a pipeline whose entry names no `schedule`; read when the DAG files are parsed")
    # Empty: derived from home and the ports (__post_init__), as `shown` says.
    bootstrap_servers: str = setting("TIDEMARK_KAFKA_BOOTSTRAP_SERVERS", TEXT, "",
        shown="`127.0.0.1:$TIDEMARK_KAFKA_PORT`")
    postgres_dsn: str = setting("TIDEMARK_POSTGRES_DSN", TEXT, "", "tidemark's PostgreSQL database (a libpq "
        "connection string)", shown="`host=127.0.0.1 port=$TIDEMARK_POSTGRES_PORT dbname=tidemark user=tidemark`")
    lake_root: str = setting("TIDEMARK_LAKE_ROOT", TEXT, "", "the Delta tables (a directory or an `s3a://` URI)",
        shown="`$TIDEMARK_HOME/lake`")
    checkpoint_root: str = setting("TIDEMARK_CHECKPOINT_ROOT", TEXT, "", "the scheduled ingest's Spark "
        "checkpoints (a directory or an `s3a://` URI)", shown="`$TIDEMARK_HOME/checkpoints`")
    jars_dir: Path = setting("TIDEMARK_JARS_DIR", PATH, Path(), "where tidemark looks for the jars `make jars` "
        "and `make jars-s3` fetch (into `.tidemark/jars/`)", shown="`$TIDEMARK_HOME/jars`")
    kafka_options: Mapping[str, str] = setting("TIDEMARK_KAFKA_OPT_<NAME>", OPTIONS, dict, "passed to every "
        "Kafka client as `<name>` (e.g. `TIDEMARK_KAFKA_OPT_SECURITY_PROTOCOL=SASL_SSL`)")
    # The ledger records the rules a run cut its sessions with and refuses a run with other rules.
    # None: the pipeline cuts no sessions (`sessions: off`).
    session_rules: SessionRules | None = setting(("TIDEMARK_SESSION_GAP_MINUTES", "TIDEMARK_SESSION_MAX_HOURS"),
        RULES, _OPTION.sessions, "the session rules (recorded; see above); a gap of `off`: no sessions")
    continue_sessions: bool = setting("TIDEMARK_CONTINUE_SESSIONS", FLAG, True, "an entity whose new records all "
        "arrive after its last stored session continues that session from its stored row instead of reading its "
        "events again (`false`: every touched entity's events are read again from its anchor; the result is the same)")
    reverify_days: float = setting("TIDEMARK_REVERIFY_DAYS", NUMBER, 7.0,
        "reconcile re-checks every verified range at least this often")
    lag_alert_minutes: float = setting("TIDEMARK_LAG_ALERT_MINUTES", NUMBER, 60.0,
        "reconcile alerts (status `lagging`) when the oldest record not processed yet arrived longer ago")
    max_offsets_per_trigger: int | str = setting("TIDEMARK_MAX_OFFSETS_PER_TRIGGER", CAP,
        _OPTION.max_offsets_per_trigger, "records per batch of a scheduled run at most: `auto` (as many as the "
        "driver's memory holds, given the size of the topic's records: docs/operations.md, \"Batch size\"), a "
        "number, or 0 (no cap)")
    # The Kafka source's maxRecordsPerPartition: parsing is a batch's heaviest scan, and a few large
    # partitions on a few cores leave cores idle (3 partitions on 2 cores: the third runs alone).
    read_task_records: int = setting("TIDEMARK_READ_TASK_RECORDS", COUNT, 25_000, "Kafka records per Spark read "
        "task at most, so a batch's parse keeps every core busy (0: one task per Kafka partition)")
    dedupe_horizon_days: float = setting("TIDEMARK_DEDUPE_HORIZON_DAYS", HORIZON, _OPTION.dedupe_horizon_days,
        "a record is compared with the stored copies of its `event_id` that arrived at most this many days before "
        "its batch's earliest record (`unbounded`: all of them). A copy arriving later than that after the first is "
        "accepted as a new event, so `events` holds a second row of that `event_id`; nothing is lost, and every "
        'record stays in exactly one table (docs/design.md, "The dedupe horizon")')
    vacuum_retain_hours: float = setting("TIDEMARK_VACUUM_RETAIN_HOURS", NUMBER, 168.0, "maintenance VACUUMs "
        "only files no table version younger than this needs (Delta's default and minimum)")
    history_days: float = setting("TIDEMARK_HISTORY_DAYS", NUMBER, 90.0, "maintenance prunes reconcile runs older "
        "than this (the latest is always kept; the ledger never)")
    # Old rows are never packed into one file with new ones, so the dedupe lookup skips the files
    # older than its horizon.
    compact_target_mb: float = setting("TIDEMARK_COMPACT_TARGET_MB", NUMBER, 128.0, "maintenance compacts a "
        "table's files smaller than this into files of up to this size, and never rewrites a file of this size. A "
        "larger target means fewer files; a smaller one means each maintenance rewrites less, and a batch's dedupe "
        'lookup reads fewer rows older than its horizon (docs/design.md, "The dedupe horizon")')
    producer_alert_threshold: int = setting("TIDEMARK_PRODUCER_ALERT_THRESHOLD", COUNT, 0,
        "`tidemark_ingest` alerts when a run's batches broke the producer requirements more often")
    # Idle timeouts and poolers keep a connection that is used.
    writer_heartbeat_seconds: float = setting("TIDEMARK_WRITER_HEARTBEAT_SECONDS", NUMBER, 30.0,
        "how often the writer lock's connection is used")
    # Spark, when tidemark builds the session itself (the CLI, tests); spark-submit's own flags win.
    spark_master: str = setting("TIDEMARK_SPARK_MASTER", TEXT, "local[2]",
        "(jobs started from Python; spark-submit brings its own)")
    shuffle_partitions: int = setting("TIDEMARK_SHUFFLE_PARTITIONS", WHOLE, 4, "`spark.sql.shuffle.partitions`")
    driver_memory: str = setting("TIDEMARK_SPARK_DRIVER_MEMORY", TEXT, "2g", "(jobs started from Python)")
    spark_ui: bool = setting("TIDEMARK_SPARK_UI", FLAG, False,
        "(`true` turns Spark's web UI on, for jobs started from Python and those the DAGs submit)")
    class_archive: bool = setting("TIDEMARK_CLASS_ARCHIVE", FLAG, True, "a local driver maps the classes an "
        "earlier one loaded from an archive under `$TIDEMARK_HOME/class-archive` (Java's class-data sharing; the "
        "first driver writes it as its JVM exits); `false`: every driver loads them from the jars")
    spark_log_level: str = setting("TIDEMARK_SPARK_LOG_LEVEL", TEXT, "ERROR",
        "Spark's own log lines, in every tidemark driver: `WARN` or `INFO` shows more (`tidemark --verbose` is `WARN`)")
    # fmt: on

    def __post_init__(self) -> None:
        # Derived defaults: fill what was left empty from home and the ports.
        home = self.home.resolve()
        dsn = f"host=127.0.0.1 port={self.postgres_port} dbname=tidemark user=tidemark"
        derived = {
            "home": home,
            "bootstrap_servers": self.bootstrap_servers or f"127.0.0.1:{self.kafka_port}",
            "schema_registry_url": self.schema_registry_url
            or f"http://127.0.0.1:{self.schema_registry_port}/apis/ccompat/v7",
            "postgres_dsn": self.postgres_dsn or dsn,
            "lake_root": self.lake_root or str(home / "lake"),
            "checkpoint_root": self.checkpoint_root or str(home / "checkpoints"),
            "jars_dir": home / "jars" if self.jars_dir == Path() else self.jars_dir,
            "pipelines_file": _checkout() / "pipelines.yaml" if self.pipelines_file == Path() else self.pipelines_file,
        }
        for name, value in derived.items():
            object.__setattr__(self, name, value)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Build settings from ``TIDEMARK_*`` variables; keyword overrides win over both."""
        env = os.environ if env is None else env
        parsers = {f.name: f.metadata["parser"] for f in fields(cls)}
        values = {f.name: parsers[f.name].read(env, f.metadata["env"]) for f in fields(cls)}
        # A field whose variables are unset is left out: it takes its default.
        settings = cls(**{name: value for name, value in values.items() if value is not parsers[name].unset})
        return replace(settings, **overrides) if overrides else settings

    def to_env(self) -> dict[str, str]:
        """The ``TIDEMARK_*`` variables that rebuild these settings in another process.

        ``Settings.from_env(s.to_env()) == s``: spark-submit, Airflow tasks and test subprocesses
        get their configuration this one way.
        """
        env: dict[str, str] = {}
        for f in fields(self):
            env.update(f.metadata["parser"].write(getattr(self, f.name), f.metadata["env"]))
        return env

    @property
    def compact_target_bytes(self) -> int:
        """The compaction target (``compact_target_mb``) in bytes, as Delta's OPTIMIZE takes it."""
        return round(self.compact_target_mb * 1024 * 1024)

    @property
    def dedupe_horizon_us(self) -> int | None:
        """The dedupe horizon in microseconds, None when unbounded."""
        return round(self.dedupe_horizon_days * 86_400_000_000) if self.dedupe_horizon_days > 0 else None

    def pipelines(self) -> list[Pipeline]:
        """The pipelines :attr:`pipelines_file` declares, or a :class:`~spark_jobs.pipelines_check.PipelinesError`
        with every problem the file has."""
        declared = self.declarations()
        if declared.problems:
            raise PipelinesError(declared.lines())
        return declared.pipelines

    def declarations(self) -> Declared:
        """What :attr:`pipelines_file` declares, entry by entry (:class:`~spark_jobs.pipelines_check.Declared`).
        What an entry leaves out comes from these settings (the pipeline ``events``'s topic is :attr:`topic`)."""
        # The pipeline events' topic is TIDEMARK_TOPIC, which the settings of another pipeline no longer hold
        # (their topic is that pipeline's): to them, an events entry without a topic reads the default one.
        # Likewise the session rules are a pipeline's own once these settings are that pipeline's (for_pipeline):
        # of the file, such settings are asked for that pipeline's entry only.
        taken = {f.name: getattr(self, f.metadata["setting"]) for f in options(Pipeline) if f.metadata["setting"]}
        defaults = Defaults(events_topic=self.names.events_topic(self.topic), **taken)
        return load_each(self.pipelines_file, defaults)

    def for_pipeline(self, pipeline: Pipeline) -> Settings:
        """These settings for a run of ``pipeline``: its name (so its tables, schema and lock), topic, and the
        options a run carries (session rules, None: off; dedupe horizon; batch cap). The contract is read from
        :attr:`pipelines_file` by name."""
        carried = {f.metadata["setting"]: getattr(pipeline, f.name) for f in options(Pipeline) if f.metadata["carried"]}
        return replace(self, pipeline=pipeline.name, topic=pipeline.topic, **carried)

    def declared(self, name: str | None = None, declared: Declared | None = None) -> Pipeline:
        """The pipeline :attr:`pipelines_file` declares as ``name`` (default: :attr:`pipeline`). Problems of
        other entries do not stop it; its own do (a :class:`~spark_jobs.pipelines_check.PipelinesError`).
        ``declared``: the file as :meth:`declarations` read it already."""
        name = name or self.pipeline
        declared = declared or self.declarations()
        if declared.problems_of(name):
            raise PipelinesError(declared.problems_of(name))
        for pipeline in declared.pipelines:
            if pipeline.name == name:
                return pipeline
        raise ConfigError(
            f"{self.pipelines_file.name} declares no pipeline {name!r} (it declares "
            f"{', '.join(p.name for p in declared.pipelines) or 'none without a problem'}): add it, or name one "
            "it declares"
        )

    def for_run(self, name: str | None = None, topic: str | None = None) -> Settings:
        """These settings for a run of the pipeline ``name`` (default: :attr:`pipeline`, ``TIDEMARK_PIPELINE``),
        with its topic: the one place a run's pipeline and topic are chosen, before any work.

        A topic feeds one pipeline. :attr:`topic` (``TIDEMARK_TOPIC``) is the pipeline ``events``' topic unless
        its entry names one, and a run's ``topic`` (``--topic``) may set it; a run of another pipeline reads that
        pipeline's own topic whatever ``TIDEMARK_TOPIC`` says, and refuses a ``--topic`` naming another. A topic
        another pipeline of the file reads is refused too. A :class:`ConfigError` says which.
        """
        name = name or self.pipeline
        chosen = replace(self, pipeline=name, topic=topic or self.topic)
        declared = chosen.declarations()  # the file, read once
        pipeline = chosen.declared(name, declared)
        if topic and topic != pipeline.topic:
            raise ConfigError(
                f"--topic {topic!r}: pipeline {name!r} reads {pipeline.topic!r} (a topic feeds one pipeline); leave "
                "--topic out, or select the pipeline that reads it with --pipeline"
            )
        others = [other for other in declared.readers_of(pipeline.topic) if other != name]
        if others:
            raise PipelinesError(
                [f"{self.pipelines_file.name}: topic {pipeline.topic!r} of pipeline {name!r} is read by pipeline "
                 f"{others[0]!r} too; a topic feeds one pipeline: give each its own topic"]
            )  # fmt: skip
        return chosen.for_pipeline(pipeline)

    def checkpoint(self, kind: str) -> str:
        """Where the pipeline's Spark query of ``kind`` (``ingest``) keeps its checkpoint: the pipeline's own
        folder of the checkpoint root, named by the topic too (a pipeline given another topic starts afresh).
        The default pipeline's is at the root's top level, where deployments made before pipelines have it."""
        return f"{self.names.folder(self.checkpoint_root)}/{kind}-{self.topic}"

    def contract(self) -> Contract:
        """The contract :attr:`pipelines_file` declares for :attr:`pipeline` (an Avro one without its schema)."""
        return self.declared().contract

    def run_contract(self) -> Contract:
        """The contract a run checks records with: :meth:`contract`, an Avro one with the registry's newest
        version of its subject as the reader schema, checked against its roles and columns (a registry that
        does not answer is a :class:`ConfigError` here, before any work)."""
        from spark_jobs.avro import reader_contract

        return reader_contract(self.contract(), self.schema_registry())

    def schema_registry(self) -> SchemaRegistry:
        """The schema registry of the Avro pipelines (:attr:`schema_registry_url`)."""
        from spark_jobs.schema_registry import SchemaRegistry

        return SchemaRegistry(self.schema_registry_url)

    @property
    def names(self) -> PipelineNames:
        """Where the pipeline's state lives and what its parts are called (:class:`PipelineNames`)."""
        return PipelineNames(self.pipeline)

    @property
    def postgres_schema(self) -> str:
        """The PostgreSQL schema holding the pipeline's tables (ledger, sessions, reconcile history, ...)."""
        return self.names.postgres_schema

    @property
    def pipeline_dsn(self) -> str:
        """:attr:`postgres_dsn` with the pipeline's schema as the only one on the search path, so every
        table a run names is the pipeline's own (and a pipeline not migrated yet says so). ``public`` too is
        named: PostgreSQL's default path starts with ``"$user"``, the schema named like the login role, and
        a pipeline may have that name."""
        from psycopg2.extensions import make_dsn, parse_dsn

        options = parse_dsn(self.postgres_dsn).get("options", "")
        return make_dsn(self.postgres_dsn, options=f"{options} -c search_path={self.postgres_schema}".strip())

    def lock_key(self, name: str) -> str:
        """The advisory-lock key ``name`` (e.g. ``tidemark-writer``) of the pipeline: each has its own."""
        return self.names.lock_key(name)

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
        """Location of the pipeline's Delta table ``name`` (a path or an object-store URI): in its folder of
        the lake root, ``<lake root>/<pipeline>/<name>``; the default pipeline's at the lake root's top level."""
        return f"{self.names.folder(self.lake_root)}/{name}"

    def secrets(self) -> list[str]:
        """The secret values these settings carry (for :func:`spark_jobs.secrets.redact`)."""
        from spark_jobs.secrets import dsn_password, option_secrets

        registry = urllib.parse.urlsplit(self.schema_registry_url).password or ""
        registry_forms = (registry, urllib.parse.unquote(registry))  # as the URL writes it, and as it is sent
        return [s for s in dict.fromkeys((dsn_password(self.postgres_dsn), *option_secrets(self.kafka_options),
                                          *registry_forms)) if s]  # fmt: skip

    def kafka_client_config(self, **extra: object) -> dict[str, object]:
        """confluent-kafka configuration for this cluster, pass-through options included."""
        from spark_jobs.kafka_clients import librdkafka_options

        # librdkafka's own log lines go to Python's logging (warnings and errors show), not straight to stderr.
        return {
            "bootstrap.servers": self.bootstrap_servers,
            "logger": logging.getLogger("tidemark.kafka"),
            **librdkafka_options(self.kafka_options),
            **extra,
        }
