import logging
from dataclasses import fields
from datetime import timedelta
from pathlib import Path
from typing import cast

import pytest
from psycopg2.extensions import parse_dsn

from spark_jobs.settings import Settings


def test_defaults_derive_from_home_and_ports(tmp_path: Path) -> None:
    settings = Settings.from_env({"TIDEMARK_HOME": str(tmp_path), "TIDEMARK_KAFKA_PORT": "9999"})
    assert settings.bootstrap_servers == "127.0.0.1:9999"
    assert settings.postgres_dsn == "host=127.0.0.1 port=15432 dbname=tidemark user=tidemark"
    assert settings.lake_root == str(tmp_path / "lake")
    assert settings.table_path("events") == f"{tmp_path}/lake/events"
    assert settings.jars_dir == tmp_path / "jars"


def test_a_pipeline_owns_its_tables_schema_locks_and_rules(tmp_path: Path) -> None:
    from spark_jobs.contract import SessionRules
    from spark_jobs.pipelines import Contract, Pipeline

    events = Settings.from_env({"TIDEMARK_HOME": str(tmp_path), "TIDEMARK_POSTGRES_DSN": "host=db options='-c x=1'"})
    rules = SessionRules(timedelta(minutes=20), timedelta(hours=6))
    web = events.for_pipeline(Pipeline("web", "web-clicks", Contract({}, "/a", "/b", "/c"), rules, 0.0, 10, None))
    # The default pipeline keeps what a deployment made before pipelines has, and names its schema too (PostgreSQL's
    # default search path starts with the schema named like the login role, which a pipeline may be named).
    assert (events.pipeline, events.postgres_schema) == ("events", "public")
    assert parse_dsn(events.pipeline_dsn) == {"host": "db", "options": "-c x=1 -c search_path=public"}
    assert events.table_path("events") == f"{tmp_path}/lake/events"
    assert events.lock_key("tidemark-writer") == "tidemark-writer"
    assert events.checkpoint("ingest") == f"{tmp_path}/checkpoints/ingest-events"
    # Another has its own folder of the lake, schema (alone on the search path: the DSN's options kept) and locks.
    assert (web.topic, web.session_rules, web.dedupe_horizon_days, web.max_offsets_per_trigger) == (
        "web-clicks",
        rules,
        0.0,
        10,
    )
    assert web.table_path("events") == f"{tmp_path}/lake/web/events"
    assert web.postgres_schema == "web" and web.lock_key("tidemark-writer") == "tidemark-writer:web"
    assert web.checkpoint("ingest") == f"{tmp_path}/checkpoints/web/ingest-web-clicks"
    assert parse_dsn(web.pipeline_dsn) == {"host": "db", "options": "-c x=1 -c search_path=web"}
    assert Settings.from_env(web.to_env()) == web


def test_a_pipeline_that_cuts_no_sessions_has_no_rules_and_its_runs_know_it_from_the_environment(
    tmp_path: Path,
) -> None:
    """``sessions: off`` reaches a Spark job as TIDEMARK_SESSION_GAP_MINUTES=off (how the operators pass settings)."""
    from spark_jobs.pipelines import Contract, Pipeline

    orders = Pipeline("orders", "orders", Contract({}, "/a", "/b", "/c"), None, 0.0, 10, None)
    settings = Settings.from_env({"TIDEMARK_HOME": str(tmp_path)}).for_pipeline(orders)
    assert settings.session_rules is None
    assert settings.to_env()["TIDEMARK_SESSION_GAP_MINUTES"] == "off"
    assert Settings.from_env(settings.to_env()) == settings


def test_the_contract_is_the_declared_pipelines(tmp_path: Path) -> None:
    from spark_jobs.errors import ConfigError
    from spark_jobs.pipelines import EVENTS_CONTRACT

    settings = Settings.from_env({"TIDEMARK_HOME": str(tmp_path)})
    assert settings.contract() == EVENTS_CONTRACT  # the shipped pipelines.yaml
    with pytest.raises(
        ConfigError, match=r"pipelines.yaml declares no pipeline 'web' \(it declares events\): add it, or name one"
    ):
        Settings.from_env({"TIDEMARK_HOME": str(tmp_path), "TIDEMARK_PIPELINE": "web"}).contract()


def test_explicit_values_win_over_derived_ones(tmp_path: Path) -> None:
    settings = Settings.from_env(
        {
            "TIDEMARK_HOME": str(tmp_path),
            "TIDEMARK_KAFKA_BOOTSTRAP_SERVERS": "kafka-1:9092,kafka-2:9092",
            "TIDEMARK_LAKE_ROOT": "s3a://bucket/lake/",
            "TIDEMARK_POSTGRES_DSN": "host=db dbname=x",
        }
    )
    assert settings.bootstrap_servers == "kafka-1:9092,kafka-2:9092"
    assert settings.table_path("sessions") == "s3a://bucket/lake/sessions"
    assert settings.postgres_dsn == "host=db dbname=x"


def test_kafka_options_pass_through_to_clients(tmp_path: Path) -> None:
    settings = Settings.from_env({"TIDEMARK_HOME": str(tmp_path), "TIDEMARK_KAFKA_OPT_SECURITY_PROTOCOL": "SASL_SSL"})
    config = settings.kafka_client_config(**{"group.id": "g"})
    assert cast(logging.Logger, config.pop("logger")).name == "tidemark.kafka", (
        "librdkafka logs through Python's logging"
    )
    assert config == {"bootstrap.servers": "127.0.0.1:19092", "security.protocol": "SASL_SSL", "group.id": "g"}


@pytest.mark.parametrize("value", ["abc", "0", "70000"])
def test_bad_port_names_the_variable(tmp_path: Path, value: str) -> None:
    with pytest.raises(ValueError, match="TIDEMARK_POSTGRES_PORT"):
        Settings.from_env({"TIDEMARK_HOME": str(tmp_path), "TIDEMARK_POSTGRES_PORT": value})


def test_kafka_cluster_ids_never_start_with_a_dash() -> None:
    from tidemark.embedded.kafka_broker import new_cluster_id

    ids = [new_cluster_id() for _ in range(2000)]  # about 31 of 2000 raw UUIDs would start with '-'
    assert not any(i.startswith("-") for i in ids)
    assert all(len(i) == 22 for i in ids) and len(set(ids)) == len(ids)


def test_to_env_rebuilds_the_same_settings(tmp_path: Path) -> None:
    settings = Settings.from_env(
        {
            "TIDEMARK_HOME": str(tmp_path),
            "TIDEMARK_PIPELINE": "web",
            "TIDEMARK_TOPIC": "clicks",
            "TIDEMARK_LAKE_ROOT": "s3a://bucket/lake",
            "TIDEMARK_KAFKA_OPT_SECURITY_PROTOCOL": "SASL_SSL",
            "TIDEMARK_SESSION_GAP_MINUTES": "12.5",
            "TIDEMARK_SESSION_MAX_HOURS": "6",
            "TIDEMARK_SHUFFLE_PARTITIONS": "8",
            "TIDEMARK_SPARK_MASTER": "spark://master:7077",
            "TIDEMARK_SPARK_UI": "true",
            "TIDEMARK_MAX_OFFSETS_PER_TRIGGER": "0",
            "TIDEMARK_READ_TASK_RECORDS": "0",
            "TIDEMARK_PRODUCER_ALERT_THRESHOLD": "25",
            "TIDEMARK_WRITER_HEARTBEAT_SECONDS": "5",
            "TIDEMARK_DEDUPE_HORIZON_DAYS": "unbounded",
        }
    )
    assert Settings.from_env(settings.to_env()) == settings
    assert settings.dedupe_horizon_us is None
    assert settings.max_offsets_per_trigger == 0 and settings.producer_alert_threshold == 25
    assert settings.read_task_records == 0
    assert settings.session_rules is not None and settings.session_rules.gap.total_seconds() == 750
    assert settings.shuffle_partitions == 8 and settings.spark_ui


def test_a_scheduled_batch_is_capped_by_default(tmp_path: Path) -> None:
    settings = Settings.from_env({"TIDEMARK_HOME": str(tmp_path)})
    assert settings.max_offsets_per_trigger == "auto" and settings.producer_alert_threshold == 0
    assert Settings.from_env({"TIDEMARK_MAX_OFFSETS_PER_TRIGGER": "AUTO "}).max_offsets_per_trigger == "auto"
    assert settings.read_task_records == 25_000


def test_the_dedupe_horizon_is_30_days_unless_set(tmp_path: Path) -> None:
    assert Settings.from_env({"TIDEMARK_HOME": str(tmp_path)}).dedupe_horizon_us == 30 * 86_400 * 1_000_000
    hours = Settings.from_env({"TIDEMARK_HOME": str(tmp_path), "TIDEMARK_DEDUPE_HORIZON_DAYS": "0.5"})
    assert hours.dedupe_horizon_us == 12 * 3600 * 1_000_000
    assert (
        Settings.from_env({"TIDEMARK_HOME": str(tmp_path), "TIDEMARK_DEDUPE_HORIZON_DAYS": "0"}).dedupe_horizon_us
        is None
    )


def test_session_rules_default_to_the_documented_values(tmp_path: Path) -> None:
    rules = Settings.from_env({"TIDEMARK_HOME": str(tmp_path)}).session_rules
    assert rules is not None
    assert rules.gap.total_seconds() == 30 * 60 and rules.max_length.total_seconds() == 24 * 3600


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"TIDEMARK_SESSION_GAP_MINUTES": "soon"}, "TIDEMARK_SESSION_GAP_MINUTES='soon' is not a number"),
        ({"TIDEMARK_SESSION_GAP_MINUTES": "-1"}, "must be positive"),
        ({"TIDEMARK_SESSION_GAP_MINUTES": "120", "TIDEMARK_SESSION_MAX_HOURS": "1"}, "shorter than the gap"),
        ({"TIDEMARK_SHUFFLE_PARTITIONS": "0"}, "TIDEMARK_SHUFFLE_PARTITIONS"),
        ({"TIDEMARK_MAX_OFFSETS_PER_TRIGGER": "lots"}, "TRIGGER='lots' must be auto, or a whole number of records"),
        ({"TIDEMARK_MAX_OFFSETS_PER_TRIGGER": "-5"}, "TRIGGER='-5' must be auto, or a whole number of records"),
        ({"TIDEMARK_READ_TASK_RECORDS": "some"}, "TIDEMARK_READ_TASK_RECORDS='some' must be a whole number"),
        ({"TIDEMARK_PRODUCER_ALERT_THRESHOLD": "-1"}, "TIDEMARK_PRODUCER_ALERT_THRESHOLD='-1' must be a whole number"),
        ({"TIDEMARK_WRITER_HEARTBEAT_SECONDS": "0"}, "TIDEMARK_WRITER_HEARTBEAT_SECONDS='0' must be positive"),
        ({"TIDEMARK_DEDUPE_HORIZON_DAYS": "forever"}, "set a number of days .* or unbounded"),
        ({"TIDEMARK_DEDUPE_HORIZON_DAYS": "-3"}, "TIDEMARK_DEDUPE_HORIZON_DAYS='-3'"),
    ],
)
def test_bad_session_rules_and_tuning_name_the_variable(tmp_path: Path, env: dict, message: str) -> None:
    from spark_jobs.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        Settings.from_env({"TIDEMARK_HOME": str(tmp_path), **env})


# A value other than the default for every declared setting: one missing here (a setting declared
# but not tested) fails the round trip test below. The odd numbers check that none loses digits.
OTHER_VALUES = {
    "TIDEMARK_KAFKA_PORT": "29092",
    "TIDEMARK_KAFKA_CONTROLLER_PORT": "29093",
    "TIDEMARK_POSTGRES_PORT": "25432",
    "TIDEMARK_SCHEMA_REGISTRY_PORT": "28081",
    "TIDEMARK_SCHEMA_REGISTRY_URL": "https://registry.example:8081/apis/ccompat/v7",
    "TIDEMARK_PIPELINE": "web",
    "TIDEMARK_TOPIC": "clicks",
    "TIDEMARK_PIPELINES": "/etc/tidemark/pipelines.yaml",
    "TIDEMARK_INGEST_SCHEDULE": "@hourly",
    "TIDEMARK_KAFKA_BOOTSTRAP_SERVERS": "kafka-1:9092,kafka-2:9092",
    "TIDEMARK_POSTGRES_DSN": "host=db dbname=x",
    "TIDEMARK_LAKE_ROOT": "s3a://bucket/lake",
    "TIDEMARK_CHECKPOINT_ROOT": "s3a://bucket/checkpoints",
    "TIDEMARK_JARS_DIR": "/opt/tidemark/jars",
    "TIDEMARK_KAFKA_OPT_SASL_MECHANISM": "SCRAM-SHA-512",
    "TIDEMARK_SESSION_GAP_MINUTES": "0.3333333333333333",
    "TIDEMARK_SESSION_MAX_HOURS": "36.5",
    "TIDEMARK_REVERIFY_DAYS": "1234567.5",
    "TIDEMARK_LAG_ALERT_MINUTES": "0.1",
    "TIDEMARK_MAX_OFFSETS_PER_TRIGGER": "1000",
    "TIDEMARK_CONTINUE_SESSIONS": "false",
    "TIDEMARK_READ_TASK_RECORDS": "0",
    "TIDEMARK_DEDUPE_HORIZON_DAYS": "0.5",
    "TIDEMARK_VACUUM_RETAIN_HOURS": "200",
    "TIDEMARK_HISTORY_DAYS": "30",
    "TIDEMARK_COMPACT_TARGET_MB": "64.25",
    "TIDEMARK_PRODUCER_ALERT_THRESHOLD": "3",
    "TIDEMARK_WRITER_HEARTBEAT_SECONDS": "5",
    "TIDEMARK_SPARK_MASTER": "spark://master:7077",
    "TIDEMARK_SHUFFLE_PARTITIONS": "16",
    "TIDEMARK_SPARK_DRIVER_MEMORY": "4g",
    "TIDEMARK_SPARK_UI": "true",
    "TIDEMARK_CLASS_ARCHIVE": "false",
    "TIDEMARK_SPARK_LOG_LEVEL": "INFO",
}


def test_every_setting_is_declared_once() -> None:
    undeclared = [f.name for f in fields(Settings) if "env" not in f.metadata]
    assert not undeclared, f"declare these Settings fields with setting(...): {undeclared}"
    names = [name for f in fields(Settings) for name in f.metadata["env"]]
    assert len(names) == len(set(names)) and all(name.startswith("TIDEMARK_") for name in names), names


def test_every_setting_round_trips_a_value_other_than_its_default(tmp_path: Path) -> None:
    defaults = Settings.from_env({})
    settings = Settings.from_env({"TIDEMARK_HOME": str(tmp_path), **OTHER_VALUES})
    same = [f.name for f in fields(Settings) if getattr(settings, f.name) == getattr(defaults, f.name)]
    assert not same, f"give these settings a value other than their default in OTHER_VALUES: {same}"
    assert Settings.from_env(settings.to_env()) == settings
    assert settings.to_env() == {"TIDEMARK_HOME": str(tmp_path.resolve()), **OTHER_VALUES}
    assert settings.session_rules is not None
    assert settings.session_rules.gap.total_seconds() == 20 and settings.jars_dir == Path("/opt/tidemark/jars")


def test_to_env_writes_every_declared_variable(tmp_path: Path) -> None:
    declared = {name for f in fields(Settings) for name in f.metadata["env"] if not name.endswith("<NAME>")}
    assert set(Settings(home=tmp_path).to_env()) == declared


def test_a_count_in_other_digits_is_a_config_error(tmp_path: Path) -> None:
    from spark_jobs.errors import ConfigError

    with pytest.raises(ConfigError, match="TIDEMARK_READ_TASK_RECORDS='²' must be a whole number"):
        Settings.from_env({"TIDEMARK_HOME": str(tmp_path), "TIDEMARK_READ_TASK_RECORDS": "²"})


def test_a_pipeline_runs_while_another_entry_of_the_file_is_broken(tmp_path: Path) -> None:
    import yaml

    from spark_jobs.errors import ConfigError

    shipped = yaml.safe_load((Path(__file__).parents[3] / "pipelines.yaml").read_text())["pipelines"][0]
    broken = {**shipped, "name": "web", "contract": {**shipped["contract"], "event_time": "/ts"}}
    (tmp_path / "pipelines.yaml").write_text(yaml.safe_dump({"pipelines": [shipped, broken]}))
    settings = Settings.from_env(
        {"TIDEMARK_HOME": str(tmp_path), "TIDEMARK_PIPELINES": str(tmp_path / "pipelines.yaml"), "TIDEMARK_TOPIC": "t"}
    )

    events = settings.for_pipeline(settings.declared("events"))
    assert (events.pipeline, events.topic) == ("events", "t")  # its topic: TIDEMARK_TOPIC, as before pipelines
    with pytest.raises(ConfigError) as raised:
        settings.declared("web")
    assert (
        str(raised.value)
        == "pipelines.yaml: pipeline 'web': contract.event_time: '/ts' is not a property the schema declares"
    )


def test_a_run_chooses_its_pipeline_and_topic_together_and_refuses_another_pipelines_topic(tmp_path: Path) -> None:
    """``TIDEMARK_PIPELINE`` or ``--pipeline`` selects a pipeline and so its topic; ``TIDEMARK_TOPIC`` and
    ``--topic`` are the pipeline events' topic, and a run of another pipeline reads its own (``--topic`` may
    only name it)."""
    import yaml

    from spark_jobs.errors import ConfigError
    from spark_jobs.pipelines_check import PipelinesError
    from spark_jobs.settings import PROJECT_ROOT

    config = yaml.safe_load((PROJECT_ROOT / "pipelines.yaml").read_text())
    web = {**config["pipelines"][0], "name": "web", "topic": "web.clicks"}
    (tmp_path / "pipelines.yaml").write_text(yaml.safe_dump({"pipelines": [*config["pipelines"], web]}))
    env = {"TIDEMARK_HOME": str(tmp_path), "TIDEMARK_PIPELINES": str(tmp_path / "pipelines.yaml")}

    assert Settings.from_env(env | {"TIDEMARK_PIPELINE": "web"}).for_run().topic == "web.clicks"
    assert Settings.from_env(env).for_run("web").topic == "web.clicks"
    assert Settings.from_env(env | {"TIDEMARK_TOPIC": "clicks"}).for_run().topic == "clicks"  # events' topic
    assert Settings.from_env(env).for_run(topic="clicks").topic == "clicks"
    web_run = Settings.from_env(env).for_run("web")
    assert Settings.from_env(web_run.to_env()).for_run() == web_run  # what a Spark job or a task gets
    # TIDEMARK_TOPIC is events' topic: a run of web reads its own, so the variable cannot make one read another's.
    assert Settings.from_env(env | {"TIDEMARK_PIPELINE": "web", "TIDEMARK_TOPIC": "clicks"}).for_run() == web_run
    with pytest.raises(ConfigError, match="^--topic 'events': pipeline 'web' reads 'web.clicks'"):
        Settings.from_env(env).for_run("web", "events")
    # The pipeline events given web's topic by the setting: both would read it.
    with pytest.raises(PipelinesError, match="topic 'web.clicks' of pipeline 'events' is read by pipeline 'web' too"):
        Settings.from_env(env | {"TIDEMARK_TOPIC": "web.clicks"}).for_run()
    with pytest.raises(PipelinesError, match="of pipeline 'events' is read by pipeline 'web' too"):
        Settings.from_env(env).for_run(topic="web_clicks")  # Kafka's same topic
